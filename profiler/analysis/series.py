"""Per-epoch series of a run for plotting, downsampled to at most `max_points` by bin means
(means keep stacked quantities adding up); long runs are reduced, never truncated."""

import numpy as np

from .. import rundir


def _bin_means(values, edges):
    values = np.asarray(values, float)
    return np.array([values[a:b].mean() for a, b in zip(edges[:-1], edges[1:])])


def series(run_dir, max_points=1000):
    run = rundir.read_run(run_dir)
    recs = run.epochs
    if not recs:
        raise rundir.RunDirError(f"{run.path} has no finished epochs to plot")
    columns = {
        "epoch": [r["epoch"] for r in recs],
        "wall_s": [r["wall_s"] for r in recs],
        "gc0_s": [r["gc"]["pause_s"][0] for r in recs],
        "gc1_s": [r["gc"]["pause_s"][1] for r in recs],
        "gc2_s": [r["gc"]["pause_s"][2] for r in recs],
        "rss_bytes": [r["rss_bytes"] for r in recs],
    }
    if all(r.get("malloc_bytes") is not None for r in recs):
        columns["malloc_bytes"] = [r["malloc_bytes"] for r in recs]
    traced = [(r["epoch"], r["heap"]["traced_bytes"]) for r in recs if r.get("heap")]
    n = len(recs)
    edges = np.linspace(0, n, min(n, max_points) + 1).astype(int)
    out = {k: _bin_means(v, edges) for k, v in columns.items()}
    out["traced"] = (np.array([e for e, _ in traced], float), np.array([b for _, b in traced], float))
    out["downsampled"] = n > max_points
    out["epochs"] = n
    return out
