"""Chrome trace event JSON of a run (Perfetto UI and chrome://tracing open it).

One time axis: microseconds since the session's clock origin (plus `offset_s`, so runs whose
origins differ, like the ranks of one job, line up). One process (pid) per run; its threads are
the tracks:

    epochs   one slice per epoch (from its start_s; runs without start_s: epochs back to back)
    steps    one slice per step, from steps.bin
    ops      each epoch's op totals, laid back to back from the epoch's start (the run records how
             long each op took per epoch, not when it ran: the slices show how the epoch divides)
    GC gen 0, GC gen 1, GC gen 2
             one slice per collection in gc_events.bin (every full collection and every long one)
    GC pause in steps / GC pause in epochs (counter)
             the GC pause inside each step by generation, from steps.bin (each epoch's without steps)
    RSS (counter)
             the process's resident memory as read inside epochs with steps (rss.bin, about once a
             second), and at each epoch's end

`events(run, pid)` yields the events of one run; `write(path, streams)` writes any number of
them as one file, streaming, so a million steps never sit in memory as Python objects. The steps
track holds the steps in `steps` (a range of step indices, by default the first MAX_STEPS: a
million steps make a ~140 MB file, about what Perfetto UI opens with ease; ten million made 1.4 GB).
"""

import json
from pathlib import Path

import numpy as np

from .. import rundir
from ..errors import RunDirError, RunWriteError
from ..replaced import replaced
from ..rundir import ranks
from ..rundir.reader import step_count

EPOCHS_TID, STEPS_TID, OPS_TID, GC_TID = 1, 2, 3, 10   # GC generation g is thread GC_TID + g
CHUNK = 1 << 16
MAX_STEPS = 1_000_000


def _us(seconds, offset_s):
    return round((seconds + offset_s) * 1e6, 3)


def _meta(pid, name):
    yield {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
    for tid, label in ((EPOCHS_TID, "epochs"), (STEPS_TID, "steps"), (OPS_TID, "ops (per-epoch totals, back to back)"),
                       (GC_TID, "GC gen 0"), (GC_TID + 1, "GC gen 1"), (GC_TID + 2, "GC gen 2 (full)")):
        yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}
        yield {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}}


def _epochs(run, pid, offset_s):
    """The epochs, the one the run stopped in too (kept apart from finished ones: it shows what ran
    up to the stop)."""
    clock, has_steps = 0.0, len(run.steps(every=True)) > 0
    apart = run.unfinished_epoch is not None and not run.ends_unfinished
    for r in [*run.epochs, *([run.unfinished_epoch] if apart else [])]:
        start = r["start_s"] if r.get("start_s") is not None else clock
        clock = start + r["wall_s"]
        name = f"epoch {r['epoch']}" + (" (unfinished)" if r.get("unfinished") else "")
        yield {"name": name, "cat": "epoch", "ph": "X", "pid": pid, "tid": EPOCHS_TID,
               "ts": _us(start, offset_s), "dur": _us(r["wall_s"], 0.0),
               "args": {"gc_pause_s": r["gc"]["pause_s"], "collections": r["gc"]["collections"],
                        "rss_bytes": r["rss_bytes"], "estimated_start": r.get("start_s") is None}}
        at = start
        for key, op in sorted(r.get("ops", {}).items(), key=lambda kv: -kv[1]["total_s"]):
            dur = min(op["total_s"], max(clock - at, 0.0))
            # placed back to back, not when the op ran: the track's name says so, once
            yield {"name": op.get("name", key), "cat": "op", "ph": "X", "pid": pid, "tid": OPS_TID,
                   "ts": _us(at, offset_s), "dur": _us(dur, 0.0),
                   "args": {"key": key, "tags": op.get("tags", {}), "calls": op["calls"], "total_s": op["total_s"]}}
            at += dur
        if not has_steps and sum(r["gc"]["pause_s"]):
            yield _gc_counter(pid, start, offset_s, [p * 1e3 for p in r["gc"]["pause_s"]], "epochs")
            yield _gc_counter(pid, clock, offset_s, [0.0, 0.0, 0.0], "epochs")


def _gc_counter(pid, at, offset_s, values_ms, items="steps"):
    return {"name": f"GC pause in {items} (ms)", "cat": "gc", "ph": "C", "pid": pid, "tid": 0, "ts": _us(at, offset_s),
            "args": {f"gen{g}": round(float(v), 6) for g, v in enumerate(values_ms)}}


def _steps(run, pid, offset_s, shown):
    steps = run.steps(every=True)   # those of the epoch the run stopped in too
    first, last = shown.indices(len(steps))[:2]
    for a in range(first, last, CHUNK):
        block = np.array(steps[a:min(a + CHUNK, last)])
        for i, s in enumerate(block.tolist(), start=a):
            epoch, start, wall, g0, g1, g2 = s
            yield {"name": "step", "cat": "step", "ph": "X", "pid": pid, "tid": STEPS_TID, "ts": _us(start, offset_s),
                   "dur": _us(wall, 0.0), "args": {"step": i, "epoch": epoch, "gc_s": [g0, g1, g2]}}
            if g0 or g1 or g2:
                yield _gc_counter(pid, start, offset_s, [g0 * 1e3, g1 * 1e3, g2 * 1e3])
                yield _gc_counter(pid, start + wall, offset_s, [0.0, 0.0, 0.0])


def _rss(run, pid, offset_s):
    """The RSS counter: the readings inside epochs and each epoch's at its end (the one the run
    stopped in too), in time order."""
    samples = run.rss_samples()
    apart = [run.unfinished_epoch] if run.unfinished_epoch is not None and not run.ends_unfinished else []
    ends = [(r["start_s"] + r["wall_s"], r["rss_bytes"]) for r in [*run.epochs, *apart]
            if r.get("start_s") is not None and r["rss_bytes"] is not None]
    for at, rss in sorted([*zip(samples["t_s"].tolist(), samples["rss_bytes"].tolist()), *ends]):
        yield {"name": "RSS (MiB)", "cat": "memory", "ph": "C", "pid": pid, "tid": 0, "ts": _us(at, offset_s),
               "args": {"rss": round(rss / (1 << 20), 3)}}


def _gc_events(run, pid, offset_s):
    events = run.gc_events()
    for a in range(0, len(events), CHUNK):
        block = np.array(events[a:a + CHUNK])
        for start, duration, generation, collected in block.tolist():
            yield {"name": f"gc gen {generation}", "cat": "gc", "ph": "X", "pid": pid, "tid": GC_TID + generation,
                   "ts": _us(start, offset_s), "dur": _us(duration, 0.0), "args": {"collected": collected}}


def events(run, pid=0, offset_s=0.0, name=None, steps=slice(0, MAX_STEPS)):
    """Every trace event of one Run, as dicts, in track order (viewers sort by time themselves);
    of its steps, those in the slice `steps`."""
    yield from _meta(pid, name or str(run.path))
    yield from _epochs(run, pid, offset_s)
    yield from _steps(run, pid, offset_s, steps)
    yield from _rss(run, pid, offset_s)
    yield from _gc_events(run, pid, offset_s)


def write(path, streams):
    """Write the events of every stream in `streams` to `path` as one trace; returns the event count.
    The trace replaces `path` only when finished (replaced.py): one that cannot be finished
    (damaged input, a full disk) leaves an earlier trace as it was."""
    path = Path(path)
    n = 0
    try:
        with replaced(path) as target, open(target, "w", encoding="utf-8") as out:
            out.write('{"displayTimeUnit": "ms", "otherData": {"time_axis": "microseconds since the clock origin"},\n'
                      ' "traceEvents": [\n')
            for stream in streams:
                for event in stream:
                    out.write((",\n" if n else "") + json.dumps(event, allow_nan=False, separators=(",", ":")))
                    n += 1
            out.write("\n]}\n")
    except OSError as e:
        if isinstance(e, BrokenPipeError):   # the reader went away: the CLI's quiet 141
            raise
        raise RunWriteError(f"cannot write the trace to {path}: {e.strerror or e}") from e
    return n


def _rank_events(rank_dir, offset_s, steps):
    run = rundir.read_run(rank_dir.path)   # one rank at a time, as the trace is written
    yield from events(run, pid=rank_dir.rank, offset_s=offset_s,
                      name=f"rank {rank_dir.rank}" + (f" ({rank_dir.host})" if rank_dir.host else ""), steps=steps)


def write_run(run_dir, path, steps=slice(0, MAX_STEPS)):
    """The trace of a run directory, or of a multi-rank run (one pid per rank, side by side on the
    ranks' aligned clocks: clock_origin_unix), with the steps in the slice `steps` (of each rank);
    returns (events written, the most steps any run recorded)."""
    if not ranks.is_multi_rank(run_dir):
        run = rundir.read_run(run_dir)
        if not run.epochs:   # as report and compare say: a trace of its metadata alone shows nothing
            raise RunDirError(f"{run.path} has no finished epochs to draw"
                              + (f" ({'; '.join(run.problems)})" if run.problems else ""))
        return write(path, [events(run, name=run.path.name, steps=steps)]), len(run.steps(every=True))
    dirs = ranks.rank_dirs(run_dir)
    origins = [d.clock_origin_unix or 0.0 for d in dirs]
    recorded = max(step_count(d.path) for d in dirs)
    return write(path, [_rank_events(d, origin - min(origins), steps) for d, origin in zip(dirs, origins)]), recorded
