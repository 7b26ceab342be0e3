"""Synthetic run directories for analysis tests: epochs.jsonl, steps.bin and gc_events.bin written
with the format's own layouts (profiler.rundir.format), no Session and no training."""

import json
from pathlib import Path

import numpy as np

from profiler.rundir.format import EPOCHS, FORMAT, GC_EVENT, GC_EVENTS, META, STEP_RECORD, STEPS

MIB = 1 << 20


def epoch(index, wall_s, *, pause=(0.0, 0.0, 0.0), collections=(0, 0, 0), rss=200 * MIB, start_s=None,
          ops=None, heap=None, malloc=None, workers=None, tracked=None, steps=None, forced=None, forced_pause=None,
          forced_sites=None):
    """One epoch record as the Session writes it. ops: {(name, (("k", "v"), ...)): seconds}; keys are
    labels made unique as capture makes them ("conv[fast]", then "conv[fast]#2"). forced and
    forced_pause: the program's own collections by generation (None: a run written before
    they were told apart); forced_sites: {site: (collections, pause_s)}."""
    record = {"epoch": index, "wall_s": wall_s,
              "gc": {"pause_s": list(pause), "collections": list(collections), "collected": [0, 0, 0],
                     "max_pause_s": max(pause), "tracked": tracked},
              "rss_bytes": int(rss), "malloc_bytes": malloc, "heap": heap, "ops": {}}
    if forced is not None:
        record["gc"].update(forced=list(forced), forced_pause_s=list(forced_pause))
    if forced_sites:
        record["gc"]["forced_sites"] = [{"site": site, "collections": n, "pause_s": p}
                                        for site, (n, p) in forced_sites.items()]
    for (name, tags), seconds in (ops or {}).items():
        label = f"{name}[{','.join(str(v) for _, v in tags)}]" if tags else name
        key = next(k for k in (label, *(f"{label}#{n}" for n in range(2, 99))) if k not in record["ops"])
        record["ops"][key] = {"name": name, "tags": dict(tags), "calls": 10, "total_s": seconds}
    if start_s is not None:
        record["start_s"] = start_s
    if steps is not None:
        record["steps"] = steps
    if workers is not None:
        record["workers"] = workers
    return record


def step_records(epoch, start_s, wall_s, gc_s=None):
    """steps.bin records (format.STEP_RECORD) of steps given in seconds (arrays, or scalars for all),
    on a clock whose origin is 0 ns (meta.json: clock_origin_ns 0); gc_s: (3, n) pauses by generation."""
    start_s, wall_s = np.asarray(start_s, float), np.asarray(wall_s, float)
    records = np.zeros(len(start_s), STEP_RECORD)
    records["epoch"] = epoch
    records["start_ns"] = np.round(start_s * 1e9)
    records["end_ns"] = records["start_ns"] + np.round(wall_s * 1e9)
    if gc_s is not None:
        for g in range(3):
            records[f"gc{g}_ns"] = np.round(np.asarray(gc_s[g], float) * 1e9)
    return records


def write_run(path, epochs, *, steps=(), gc_events=(), meta=None, status="completed", options=None):
    """A run directory at `path`: epochs (records), steps ((epoch, start_s, wall_s, g0, g1, g2), ...),
    gc_events ((start_s, duration_s, generation, collected), ...); options: meta.json's (the Session's)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    (path / META).write_text(json.dumps({"format": FORMAT, "status": status, "error": None, "meta": meta or {},
                                         "clock_origin_unix": 1.7e9, "clock_origin_ns": 0,
                                         **({"options": options} if options else {})}), encoding="utf-8")
    (path / EPOCHS).write_text("".join(json.dumps(r) + "\n" for r in epochs), encoding="utf-8")
    if len(steps):
        columns = np.asarray(steps, float).T
        (path / STEPS).write_bytes(step_records(columns[0], columns[1], columns[2], columns[3:]).tobytes())
    if len(gc_events):
        (path / GC_EVENTS).write_bytes(b"".join(GC_EVENT.pack(*e) for e in gc_events))
    return path


def from_walls(path, walls, **kwargs):
    """A run whose epochs take `walls` seconds (back to back), nothing else happening."""
    return write_run(path, [epoch(i, float(w)) for i, w in enumerate(walls)], **kwargs)


def stepped_run(path, epochs, steps_per_epoch, step_s, pause_at, rss=lambda epoch: 200 * MIB):
    """A run of `epochs` x `steps_per_epoch` steps of `step_s` seconds; pause_at(step_index) ->
    (generation, pause seconds) or None puts a GC pause inside that step (and a GC event); rss(epoch)
    the epoch's RSS."""
    records, steps, events, clock, n = [], [], [], 0.0, 0
    for e in range(epochs):
        start, pause = clock, [0.0, 0.0, 0.0]
        collections = [0, 0, 0]
        for _ in range(steps_per_epoch):
            gens = [0.0, 0.0, 0.0]
            hit = pause_at(n)
            if hit:
                generation, seconds = hit
                gens[generation] = seconds
                pause[generation] += seconds
                collections[generation] += 1
                events.append((clock + step_s / 2, seconds, generation, 0))
            wall = step_s + sum(gens)
            steps.append((e, clock, wall, *gens))
            clock += wall
            n += 1
        records.append(epoch(e, clock - start, pause=pause, collections=collections, start_s=start,
                             steps=steps_per_epoch, rss=rss(e)))
    return write_run(path, records, steps=steps, gc_events=events)
