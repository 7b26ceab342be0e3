"""analyze(run_dir) -> Diagnosis: is the epoch slow or getting slower, and why, with numbers.

The attribution follows what the first seed thread did by hand:
  1. Is there a slowdown? Late vs early median epoch time, confirmed by a Theil-Sen trend, so noise
     on a shared machine (or one slow epoch) is not called a slowdown.
  2. How much of the increase do GC pauses explain? If most: "gc", and say which generation and,
     when memory is traced, where the accumulating objects come from.
  3. Otherwise, is memory growing steadily (RSS, malloc in use, traced bytes)? "allocation", with the file:line
     that grows.
  4. Otherwise the time went to computing: "compute", naming the op (and layout) whose time grew.
Without a slowdown, a steady memory leak is still "allocation", and GC taking a large share of
every epoch is still "gc" (slow, though not slower: the case where epoch time depends on
max_epochs). Anything else is "none".
"""

from dataclasses import asdict, dataclass, field

import numpy as np

from .. import rundir
from . import stats

SLOWDOWN = 0.10             # late/early median ratio and trend growth that count as a slowdown
GC_EXPLAINS = 0.5           # share of the increase GC must explain to be the cause
GC_HEAVY = 0.25             # share of epoch time that makes GC a cause even without a slowdown
RSS_LEAK_BYTES = 16 << 20   # total RSS growth over the run that counts as a leak...
RSS_LEAK_SHARE = 0.05       # ...and as a share of the starting RSS
TRACED_LEAK_BYTES = 4 << 20


@dataclass
class Diagnosis:
    run_dir: str
    epochs: int
    status: str
    complete: bool
    problems: list
    epoch_time: dict
    primary_cause: str
    gc: dict
    allocation: dict
    ops: list = field(default_factory=list)
    verdict: str = ""
    meta: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)


def _gc_pause(record):
    return sum(record["gc"]["pause_s"])


def _rate(records, value):
    """Theil-Sen growth per epoch of value(record), over the records that have one (None if none do)."""
    points = [(r["epoch"], v) for r in records if (v := value(r)) is not None]
    return stats.slope(*zip(*points)) if points else None


def _top_sites(records, n=10):
    totals = {}
    for r in records:
        for site in ((r.get("heap") or {}).get("top_growth") or []):
            entry = totals.setdefault(site["site"], {"site": site["site"], "size_diff": 0, "count_diff": 0,
                                                     "kind": site.get("kind", "python")})
            entry["size_diff"] += site["size_diff"]
            entry["count_diff"] += site.get("count_diff", 0)
    return sorted((s for s in totals.values() if s["size_diff"] > 0), key=lambda s: -s["size_diff"])[:n]


def _op_growth(records):
    """Per op key: early and late median seconds per epoch, sorted by growth."""
    w = stats.window(len(records))
    keys = sorted({k for r in records for k in r.get("ops", {})})
    rows = []
    for key in keys:
        series = [r.get("ops", {}).get(key, {}).get("total_s", 0.0) for r in records]
        early, late = float(np.median(series[:w])), float(np.median(series[-w:]))
        rows.append({"op": key, "early_s": early, "late_s": late, "growth_s": late - early,
                     "calls_per_epoch": float(np.median([r.get("ops", {}).get(key, {}).get("calls", 0)
                                                         for r in records]))})
    return sorted(rows, key=lambda r: -r["growth_s"])


def _pct(x):
    return f"{100 * x:.1f}%"


def _mib(b):
    return f"{b / (1 << 20):.1f} MiB"


def analyze(run_dir):
    """Read a run directory and diagnose it (RunDirError if it cannot be read or has no epochs)."""
    run = rundir.read_run(run_dir)
    if not run.epochs:
        raise rundir.RunDirError(f"{run.path} has no finished epochs to analyze"
                                 + (f" ({'; '.join(run.problems)})" if run.problems else ""))
    records = run.epochs[stats.warmup(len(run.epochs)):]
    idx = np.array([r["epoch"] for r in records], float)
    wall = np.array([r["wall_s"] for r in records])
    pause = np.array([_gc_pause(r) for r in records])
    rss = np.array([r["rss_bytes"] for r in records], float)

    early_s, late_s = stats.early_late(wall)
    ratio = late_s / early_s if early_s > 0 else 1.0
    trend = stats.slope(idx, wall)
    span = max(idx[-1] - idx[0], 1.0) if len(idx) else 1.0
    trend_growth = trend * span / early_s if early_s > 0 else 0.0
    slowdown = len(records) >= 4 and ratio >= 1 + SLOWDOWN and trend_growth >= SLOWDOWN

    share = np.divide(pause, wall, out=np.zeros_like(wall), where=wall > 0)
    share_early, share_late = stats.early_late(share)
    gc_early, gc_late = stats.early_late(pause)
    delta = late_s - early_s
    explained = float(np.clip((gc_late - gc_early) / delta, 0.0, 1.0)) if delta > 0 else 0.0
    gen_growth = [stats.early_late([r["gc"]["pause_s"][g] for r in records]) for g in range(3)]
    generation = int(np.argmax([late - early for early, late in gen_growth])) if slowdown else \
        int(np.argmax([late for _, late in gen_growth]))
    full_per_epoch = float(np.median([r["gc"]["collections"][2] for r in records]))

    rss_rate = _rate(records, lambda r: r["rss_bytes"])
    malloc_rate = _rate(records, lambda r: r.get("malloc_bytes"))
    traced_rate = _rate(records, lambda r: (r.get("heap") or {}).get("traced_bytes"))
    top_sites = _top_sites(records)
    rss_leak = rss_rate * span >= max(RSS_LEAK_BYTES, RSS_LEAK_SHARE * rss[0]) if len(rss) >= 4 else False
    traced_leak = traced_rate is not None and traced_rate * span >= TRACED_LEAK_BYTES
    malloc_leak = malloc_rate is not None and malloc_rate * span >= RSS_LEAK_BYTES
    leaking = rss_leak or traced_leak or malloc_leak

    ops = _op_growth(records)

    if slowdown and explained >= GC_EXPLAINS:
        cause = "gc"
    elif slowdown and leaking:
        cause = "allocation"
    elif slowdown:
        cause = "compute"
    elif leaking:
        cause = "allocation"
    elif share_late >= GC_HEAVY:
        cause = "gc"
    else:
        cause = "none"

    diagnosis = Diagnosis(
        run_dir=str(run.path), epochs=len(run.epochs), status=run.status, complete=run.complete,
        problems=run.problems,
        epoch_time={"early_median_s": early_s, "late_median_s": late_s, "ratio": ratio,
                    "trend_s_per_epoch": trend, "trend_growth": trend_growth, "slowdown": bool(slowdown),
                    "warmup_epochs_skipped": len(run.epochs) - len(records)},
        primary_cause=cause,
        gc={"share_early": share_early, "share_late": share_late, "explained_fraction": explained,
            "pause_early_s": gc_early, "pause_late_s": gc_late, "generation": generation,
            "full_collections_per_epoch": full_per_epoch},
        allocation={"rss_growth_bytes_per_epoch": rss_rate, "traced_growth_bytes_per_epoch": traced_rate,
                    "malloc_growth_bytes_per_epoch": malloc_rate,
                    "rss_start_bytes": float(rss[0]), "rss_end_bytes": float(rss[-1]), "top_sites": top_sites},
        ops=ops, meta=run.meta.get("meta", {}),
    )
    diagnosis.verdict = _verdict(diagnosis, slowdown, leaking)
    return diagnosis


def _sites_sentence(sites, kind=None):
    chosen = [s for s in sites if kind is None or s["kind"] == kind][:3]
    if not chosen:
        return ""
    parts = [f"{s['site']} (+{_mib(s['size_diff'])}, +{s['count_diff']} blocks)" for s in chosen]
    return " The lines whose memory grew most: " + "; ".join(parts) + "."


def _verdict(d, slowdown, leaking):
    et, g, a = d.epoch_time, d.gc, d.allocation
    times = f"median epoch time {et['early_median_s'] * 1e3:.2f} ms early, {et['late_median_s'] * 1e3:.2f} ms late"
    head = (f"Epochs get slower: {times} ({et['ratio']:.2f}x). " if slowdown
            else f"Epochs do not get slower: {times} ({et['ratio']:.2f}x). ")
    gc_numbers = (f"GC takes {_pct(g['share_early'])} of epoch time early and {_pct(g['share_late'])} late "
                  f"(generation {g['generation']}, {g['full_collections_per_epoch']:.0f} full collections per epoch)")
    cause = d.primary_cause
    if cause == "gc" and slowdown:
        text = (f"{head}Garbage collection explains {_pct(g['explained_fraction'])} of the increase: {gc_numbers}. "
                f"Each collection walks every live GC-tracked object, so tracked objects that accumulate or are "
                f"kept for the whole run (e.g. a preallocated per-epoch history) make every full collection slower.")
        if leaking:
            text += (f" They accumulate: RSS grows {_mib(a['rss_growth_bytes_per_epoch'])} per epoch "
                     f"({_mib(a['rss_start_bytes'])} -> {_mib(a['rss_end_bytes'])}).")
        text += _sites_sentence(a["top_sites"], "python") or (
            " Run with --tracemalloc auto to find where the objects come from.")
    elif cause == "gc":
        text = (f"{head}But {gc_numbers}: every epoch pays for collections over objects that live for the whole run; "
                f"their number, not the epoch index, sets the cost (compare runs with `profiler scaling`).")
        text += _sites_sentence(a["top_sites"], "python")
    elif cause == "allocation":
        text = (f"{head}Memory grows steadily: RSS {'+' if a['rss_growth_bytes_per_epoch'] >= 0 else ''}"
                f"{_mib(a['rss_growth_bytes_per_epoch'])} per epoch ({_mib(a['rss_start_bytes'])} -> "
                f"{_mib(a['rss_end_bytes'])})")
        if a["malloc_growth_bytes_per_epoch"] is not None:
            text += f", malloc in use {_mib(a['malloc_growth_bytes_per_epoch'])} per epoch"
        if a["traced_growth_bytes_per_epoch"] is not None:
            text += f", traced heap {_mib(a['traced_growth_bytes_per_epoch'])} per epoch"
        text += "." + (_sites_sentence(a["top_sites"]) or
                       " Run with --tracemalloc auto (or on) to name the lines that allocate it.")
        if slowdown:
            text += f" GC explains only {_pct(g['explained_fraction'])} of the slowdown."
    elif cause == "compute":
        top = d.ops[0] if d.ops and d.ops[0]["growth_s"] > 0 else None
        delta = et["late_median_s"] - et["early_median_s"]
        text = f"{head}GC explains only {_pct(g['explained_fraction'])} of the increase and memory is flat, so it is compute"
        if top:
            name, _, tag = top["op"].partition("[")
            text += (f": {name}{' in ' + tag.rstrip(']') if tag else ''} went from {top['early_s'] * 1e3:.2f} to "
                     f"{top['late_s'] * 1e3:.2f} ms per epoch, {_pct(min(top['growth_s'] / delta, 1.0))} of the increase.")
        else:
            text += "; no op timers were recorded, so it cannot say which part (wrap parts of the step in session.op())."
    else:
        text = f"{head}{gc_numbers[0].upper() + gc_numbers[1:]}; memory is flat. Nothing to fix here."
    if d.problems:
        text += " Note: the run is incomplete (" + "; ".join(d.problems) + ")."
    return text
