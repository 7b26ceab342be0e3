"""Multi-rank run directories written directly (no training): known answers for the merged analysis,
and synthetic jobs for benchmarks/ranks.py."""

import json

import numpy as np

from profiler.rundir import FORMAT, GC_EVENTS, STEPS, RunWriter
from profiler.rundir.format import BACKWARD_OP, DATALOADER_OP, EPOCHS, GC_EVENT_DTYPE, META, STEP_RECORD

from .fixtures import step_records

ORIGIN_UNIX = 1.8e9


def write_rank(path, rank, world_size, wall_s, gc_s=None, *, start_s=None, gap_gc2_s=None, status="completed",
               steps_per_epoch=None, host="node-0", local_rank=None, rss_growth=0, job=None, origin_unix=ORIGIN_UNIX,
               error=None, finished_unix=None, data_s=None, backward_s=None):
    """A rank's run directory: steps.bin from wall_s (n,), gc_s (3, n) pauses by generation inside
    the steps and start_s (n,) (back to back by default); gap_gc2_s (n,) a generation-2 collection
    just before each step (gc_events.bin); one epochs.jsonl record per `steps_per_epoch` steps (the
    whole run as one epoch by default); data_s (n,) or a number: each step's wait for its DataLoader
    batch (the op DataLoader.__next__); backward_s likewise, its Tensor.backward() (the op
    Tensor.backward)."""
    wall_s = np.asarray(wall_s, float)
    n = len(wall_s)
    gc_s = np.zeros((3, n)) if gc_s is None else np.asarray(gc_s, float)
    per_epoch = steps_per_epoch or max(n, 1)
    start_s = np.cumsum(wall_s) - wall_s if start_s is None else np.asarray(start_s, float)
    steps = step_records(np.arange(n) // per_epoch, start_s, wall_s, gc_s)
    writer = RunWriter(path)
    writer.write_meta({"format": FORMAT, "status": status, "error": error, "meta": {"label": f"rank {rank}"},
                       "finished_unix": finished_unix,
                       "host": host, "rank": rank, "world_size": world_size,
                       "local_rank": rank if local_rank is None else local_rank, "clock_origin_unix": origin_unix,
                       "clock_origin_ns": 0, "job": job})
    writer.append_binary(STEPS, steps.tobytes())
    if gap_gc2_s is not None:
        at = np.flatnonzero(gap_gc2_s)
        events = np.zeros(len(at), GC_EVENT_DTYPE)
        events["start_s"] = start_s[at] - gap_gc2_s[at]   # ends as the step begins
        events["duration_s"], events["generation"], events["collected"] = gap_gc2_s[at], 2, 0
        writer.append_binary(GC_EVENTS, events.tobytes())
    for e, start in enumerate(range(0, n, per_epoch)):
        part = slice(start, start + per_epoch)
        pauses = [float(gc_s[g][part].sum()) for g in range(3)]
        collections = [int((gc_s[g][part] > 0).sum()) for g in range(3)]
        writer.append_epoch({"epoch": e, "start_s": float(start_s[start]), "wall_s": float(wall_s[part].sum()),
                             "steps": len(wall_s[part]),
                             "gc": {"pause_s": pauses, "collections": collections,
                                    "collected": [0, 0, 0], "max_pause_s": float(gc_s[:, part].max(initial=0.0))},
                             "rss_bytes": 100_000_000 + rss_growth * e, "heap": None,
                             "ops": {**_op(DATALOADER_OP, data_s, n, part), **_op(BACKWARD_OP, backward_s, n, part)}})
    writer.close()
    return path


def _op(name, seconds, n, part):
    """The op `name` of an epoch's steps `part`, each taking `seconds` (n,) or a number; {} for None."""
    if seconds is None:
        return {}
    times = np.broadcast_to(np.asarray(seconds, float), (n,))[part]
    return {name: {"name": name, "tags": {}, "calls": len(times), "total_s": float(times.sum()), "timed": len(times)}}


def synthetic_job(root, ranks, steps, *, straggler=None, every=10, pause_s=0.008, step_s=0.010, load_s=0.0005,
                  noise_s=0.0003, seed=0, where="step", cause="gc", collective="in-step", epochs=10, spread=0.0):
    """A synchronised data-parallel job simulated step by step: each rank loads its batch, computes,
    and meets the others at the collective, either inside the step (the step ends when the slowest
    rank arrives) or between steps (the next step begins then). Rank `straggler` stalls for
    `pause_s` every `every` steps, in its step or while loading (before the step), in a
    generation-2 collection (cause "gc") or in its own work ("compute"). spread: the chance that any
    rank stalls at any step in the same way (no rank more than the others)."""
    rng = np.random.default_rng(seed)
    start, wall = np.empty((ranks, steps)), np.empty((ranks, steps))
    gc, gap_gc2 = np.zeros((ranks, 3, steps)), np.zeros((ranks, steps))
    gc[:, 0] = 0.00002 * (rng.random((ranks, steps)) < 0.3)     # short young collections everywhere
    ready = np.zeros(ranks)                                     # when each rank may begin loading
    for i in range(steps):
        load = load_s + 0.1 * noise_s * rng.random(ranks)         # reading a batch: steadier than computing
        compute = step_s + noise_s * rng.random(ranks)
        stalled = rng.random(ranks) < spread
        if straggler is not None and i % every == every - 1:
            stalled[straggler] = True
        for r in np.flatnonzero(stalled):
            if where == "step":
                compute[r] += pause_s
                if cause == "gc":
                    gc[r, 2, i] = pause_s
            else:
                load[r] += pause_s
                if cause == "gc":
                    gap_gc2[r, i] = pause_s
        start[:, i] = ready + load
        if collective == "in-step":
            end = np.full(ranks, (start[:, i] + compute).max() + 0.0001)   # all-reduce, then the update
            ready = end
        else:
            end = start[:, i] + compute
            ready = np.full(ranks, end.max() + 0.0001)
        wall[:, i] = end - start[:, i]
    for rank in range(ranks):
        write_rank(root / f"rank-{rank}", rank, ranks, wall[rank], gc[rank], start_s=start[rank],
                   gap_gc2_s=gap_gc2[rank] if gap_gc2[rank].any() else None, steps_per_epoch=max(steps // epochs, 1),
                   host=f"node-{rank // 8}", local_rank=rank % 8)
    return root


def cut_rank(path, epochs, *, steps=None, torn=False, status=None):
    """A rank's run directory cut as a kill leaves it: epochs.jsonl's first `epochs` lines, then
    half of the next one when `torn` (a crash mid-write); steps.bin's first `steps` records (all by
    default: steps of the epochs after are written before their lines); meta.json's status
    `status` (kept by default)."""
    lines = (path / EPOCHS).read_bytes().splitlines(keepends=True)
    (path / EPOCHS).write_bytes(b"".join(lines[:epochs]) + (lines[epochs][:len(lines[epochs]) // 2] if torn else b""))
    if steps is not None:
        (path / STEPS).write_bytes((path / STEPS).read_bytes()[:steps * STEP_RECORD.itemsize])
    if status is not None:
        meta = json.loads((path / META).read_text())
        (path / META).write_text(json.dumps({**meta, "status": status}))
    return path
