"""Multi-rank run directories written directly (no training): known answers for the merged analysis,
and synthetic jobs for benchmarks/ranks.py."""

import numpy as np

from profiler.rundir import FORMAT, GC_EVENTS, STEPS, RunWriter
from profiler.rundir.reader import GC_EVENT_DTYPE, STEP_DTYPE


def write_rank(path, rank, world_size, wall_s, gc_s=None, *, status="completed", steps_per_epoch=None,
               host="node-0", local_rank=None, rss_growth=0, gap_s=None, gap_gc2_s=None):
    """A rank's run directory: steps.bin from wall_s (n,) and gc_s (3, n) pauses by generation inside
    the steps, gap_s (n,) time before each step and gap_gc2_s (n,) a generation-2 collection in that
    gap (gc_events.bin), and one epochs.jsonl record per `steps_per_epoch` steps (the whole run as
    one epoch by default)."""
    wall_s = np.asarray(wall_s, float)
    n = len(wall_s)
    gc_s = np.zeros((3, n)) if gc_s is None else np.asarray(gc_s, float)
    gap_s = np.zeros(n) if gap_s is None else np.asarray(gap_s, float)
    per_epoch = steps_per_epoch or max(n, 1)
    steps = np.zeros(n, STEP_DTYPE)
    steps["epoch"] = np.arange(n) // per_epoch
    steps["start_s"] = np.cumsum(gap_s + wall_s) - wall_s
    steps["wall_s"] = wall_s
    for g in range(3):
        steps[f"gc{g}_s"] = gc_s[g]
    writer = RunWriter(path)
    writer.write_meta({"format": FORMAT, "status": status, "error": None, "meta": {"label": f"rank {rank}"},
                       "host": host, "rank": rank, "world_size": world_size,
                       "local_rank": rank if local_rank is None else local_rank, "clock_origin_unix": 1.8e9})
    writer.append_binary(STEPS, steps.tobytes())
    if gap_gc2_s is not None:
        at = np.flatnonzero(gap_gc2_s)
        events = np.zeros(len(at), GC_EVENT_DTYPE)
        events["start_s"] = steps["start_s"][at] - gap_s[at] + 1e-6   # just after the last step ends
        events["duration_s"], events["generation"], events["collected"] = gap_gc2_s[at], 2, 0
        writer.append_binary(GC_EVENTS, events.tobytes())
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
                  seed=0, where="in-step", cause="gc"):
    """`ranks` ranks of a synchronised job; rank `straggler` stalls for `pause_s` every `every` steps,
    in a generation-2 collection (cause "gc") or in its own work ("compute"). Where the stall falls:
      in-step        inside the step, before its collective: every rank's step is as long, and only
                     the straggler's GC tells it apart
      own-step       inside the step, the collective after the step's end: only the straggler's step is longer
      between-steps  before the straggler's step begins (data loading): the others' steps are longer
                     (they wait at the collective), the straggler's is not"""
    rng = np.random.default_rng(seed)
    stalled = np.arange(steps) % every == every - 1
    for rank in range(ranks):
        wall = step_s + noise_s * rng.random(steps)
        gc = np.zeros((3, steps))
        gc[0] = 0.00002 * (rng.random(steps) < 0.3)
        mine = rank == straggler
        gap = gap_gc2 = None
        if straggler is not None:
            if where == "in-step" or (where == "own-step" and mine) or (where == "between-steps" and not mine):
                wall = wall + pause_s * stalled
            if mine and cause == "gc" and where != "between-steps":
                gc[2] = pause_s * stalled
            if mine and where == "between-steps":
                gap = pause_s * stalled
                gap_gc2 = gap if cause == "gc" else None
        write_rank(root / f"rank-{rank}", rank, ranks, wall, gc, steps_per_epoch=max(steps // 10, 1),
                   host=f"node-{rank // 8}", local_rank=rank % 8, gap_s=gap, gap_gc2_s=gap_gc2)
    return root
