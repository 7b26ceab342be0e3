"""Multi-rank run directories written directly (no training): known answers for the merged analysis,
and synthetic jobs for benchmarks/ranks.py."""

import numpy as np

from profiler.rundir import FORMAT, STEPS, RunWriter
from profiler.rundir.reader import STEP_DTYPE


def write_rank(path, rank, world_size, wall_s, gc_s=None, *, status="completed", steps_per_epoch=None,
               host="node-0", local_rank=None, rss_growth=0):
    """A rank's run directory: steps.bin from wall_s (n,) and gc_s (3, n) pauses by generation, and
    one epochs.jsonl record per `steps_per_epoch` steps (the whole run as one epoch by default)."""
    wall_s = np.asarray(wall_s, float)
    n = len(wall_s)
    gc_s = np.zeros((3, n)) if gc_s is None else np.asarray(gc_s, float)
    per_epoch = steps_per_epoch or max(n, 1)
    steps = np.zeros(n, STEP_DTYPE)
    steps["epoch"] = np.arange(n) // per_epoch
    steps["start_s"] = np.concatenate([[0.0], np.cumsum(wall_s)[:-1]]) if n else []
    steps["wall_s"] = wall_s
    for g in range(3):
        steps[f"gc{g}_s"] = gc_s[g]
    writer = RunWriter(path)
    writer.write_meta({"format": FORMAT, "status": status, "error": None, "meta": {"label": f"rank {rank}"},
                       "host": host, "rank": rank, "world_size": world_size,
                       "local_rank": rank if local_rank is None else local_rank, "clock_origin_unix": 1.8e9})
    writer.append_binary(STEPS, steps.tobytes())
    for e, start in enumerate(range(0, n, per_epoch)):
        part = slice(start, start + per_epoch)
        pauses = [float(gc_s[g][part].sum()) for g in range(3)]
        writer.append_epoch({"epoch": e, "wall_s": float(wall_s[part].sum()),
                             "gc": {"pause_s": pauses, "collections": [int((gc_s[g][part] > 0).sum()) for g in range(3)],
                                    "collected": [0, 0, 0], "max_pause_s": float(gc_s[:, part].max(initial=0.0))},
                             "rss_bytes": 100_000_000 + rss_growth * e, "heap": None, "ops": {}})
    writer.close()
    return path


def synthetic_job(root, ranks, steps, *, straggler=None, every=10, pause_s=0.008, step_s=0.010, noise_s=0.0003,
                  seed=0, in_step=True, cause="gc"):
    """`ranks` ranks of a synchronised job; rank `straggler` stalls for `pause_s` every `every` steps,
    in a generation-2 collection (cause "gc") or in its own work ("compute").
    in_step: the stall falls before the collective, so every rank's step is as long (only the
    straggler's GC tells it apart); otherwise only the straggler's own step is longer."""
    rng = np.random.default_rng(seed)
    stalled = np.arange(steps) % every == every - 1
    for rank in range(ranks):
        wall = step_s + noise_s * rng.random(steps)
        gc = np.zeros((3, steps))
        gc[0] = 0.00002 * (rng.random(steps) < 0.3)
        if straggler is not None and (in_step or rank == straggler):
            wall = wall + pause_s * stalled
        if rank == straggler and cause == "gc":
            gc[2] = pause_s * stalled
        write_rank(root / f"rank-{rank}", rank, ranks, wall, gc, steps_per_epoch=max(steps // 10, 1),
                   host=f"node-{rank // 8}", local_rank=rank % 8)
    return root
