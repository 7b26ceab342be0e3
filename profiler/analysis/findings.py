"""Findings: each problem a run shows, with the share of the run's time it costs and its evidence
as numbers (the sentences and remedies are written by profiler/report/text.py).

    gc-steady           GC pauses spread over the whole run (share of wall time outside spikes and growth)
    gc-spikes           steps or epochs far above the median whose excess GC pauses explain
    gc-growing-pauses   full collections that take longer as the run goes on (tracked objects pile up)
    gc-between-epochs   collections in the gaps between epochs (a gc.collect() after each one), as a
                        share of the epochs' time and the gaps' together
    allocation-growth   RSS, malloc or traced memory that keeps growing (or grew, then levelled off)
                        over the epochs; in a run of too few epochs to fit, anonymous memory (RSS less
                        its shared pages) that keeps growing through their time (read about once a
                        second inside them: an LLM's one epoch)
    compute-growth      a sustained slowdown that GC does not explain, by op
    input-wait          the training thread waiting for a torch DataLoader's next batch
    worker-copy-on-read child processes (DataLoader workers) whose private memory approaches the
                        parent's RSS or grows (across epochs, or within one since each worker
                        started): reading shared Python objects, or the worker's own full
                        collection walking them, copies their pages

The first three split the epochs' GC time between them (spike pauses; the growth above the first
full collection's duration, outside spikes; the rest), so their time fractions do not count a
pause twice; gc-between-epochs' pauses are in no epoch.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from ..rundir.format import DATALOADER_OP, FORCED_SITES
from . import stats
from .load import timed

MEANINGFUL = 0.05            # share of the run's time that makes a cost a finding (and leads the ranking)
INPUT_WAIT = 0.20            # share of the epochs' time waiting for DataLoader batches that makes input-wait:
                             # gathering small batches in the training process takes 5-16% of a toy model's epoch
CHEAP_BATCH_S = 1e-3         # a batch gathered faster than this costs about as much to hand over from a worker
SPIKE_FRACTION = 0.02        # share of the run's time in spike excess that is worth a finding...
SPIKE_GC_EXPLAINS = 0.5      # ...when GC pauses explain at least this share of it
PAUSE_GROWTH = 0.25          # relative growth of full-collection time that is a finding...
PAUSE_GROWTH_S = 0.5e-3      # ...when it grows by at least this, or costs MEANINGFUL: a short clean run's 0.08-ms
                             # collections drifted to 0.10 ms (+25%); a small heap's (2.9 ms) took 2.3-4.0 ms
                             # (5th-95th percentile) back to back on the project's VM
MIN_EVENTS = 8               # full collections needed to fit their trend
RSS_LEAK_BYTES = 16 << 20    # growth over the run that counts as growing memory...
RSS_LEAK_SHARE = 0.05        # ...and as a share of the starting RSS
MEMORY_MIN_EPOCHS = 4        # epochs (after the warm-up) needed to call memory growing
RSS_TREND_SAMPLES = 10       # RSS readings inside fewer epochs than that which tell a trend through their time
RSS_TREND_BINS = 12          # their rises and drops are summed over at most this many bin medians (noise tamed)
STEP_NOISE = 6.0             # a rise from one reading to the next this many times their median move is a step
TRACED_LEAK_BYTES = 4 << 20
SITES_EXPLAIN = 0.1          # sites that account for less of a growth than this do not explain it
LEVELS_OFF = 0.2             # growth in the last third below this share of the overall rate: levelled off
LEVEL_NOISE = 4.0            # a rise of the last third over the first beyond this many mean moves is growth
WORKER_SHARE = 0.5           # workers' private memory against the parent's RSS that suggests copy-on-read
WORKER_GC_COPY_BYTES = 8 << 20   # a worker's collection's copy worth a remedy (a frozen parent's: under 1 MiB here)
WORKER_GROWTH_BYTES = 16 << 20   # one worker's USS growth since it started that does
PREFETCH_DEFAULT = 2             # DataLoader's batches in flight per worker when it records none
GC_EXPLAINS = 0.5            # share of a slowdown GC must explain to leave compute out
FORCED_SHOWN = 0.05          # share of the GC pause the program's own gc.collect() calls take that is worth saying...
FORCED_LEADS = 0.5           # ...and that makes them the remedy


@dataclass
class Site:
    site: str
    size_diff: int
    count_diff: int
    kind: str = "python"


@dataclass
class Objects:
    """What every full collection walks: GC-tracked objects and the type that dominates them."""
    tracked: int | None                     # tracked objects at the latest count (all generations)
    tracked_growth_per_epoch: float | None
    tracked_epoch: int | None = None        # the epoch of that count: a count walks every object, so a
    last_epoch: int | None = None           # budget spaces them out, and a heap that grows fast outruns it
    top_type: str | None = None
    top_type_share: float | None = None     # of the tracked objects (or of the listed types)
    top_type_growth_per_epoch: float | None = None
    top_type_site: str | None = None


@dataclass
class Forced:
    """The collections the program asked for (gc.collect()) rather than allocation triggered."""
    share: float                    # of all GC pause
    pause_s: float
    collections_per_epoch: list     # mean per generation
    site: str | None                # the line whose collections paused longest (None: no line recorded)
    sites: list = field(default_factory=list)   # every line recorded, the longest paused first
    via: str | None = None          # the installed package's line the first site's came through, if any
    collections: list = field(default_factory=lambda: [0, 0, 0])   # over the run, per generation
    generation: int = 2             # the generation with the most of their pause
    only: bool = False              # CPython made no collection of its own (the collector off, or the calls keep
                                    # its threshold from being reached)
    more_sites: bool = False        # an epoch had more lines than its record keeps (the 3 longest paused):
                                    # `sites` names only some


@dataclass
class GcSteady:
    share_total: float              # all GC pause / all wall time
    steady_s: float                 # GC time outside spikes and growth
    wall_s: float
    generation: int                 # generation with the most pause time
    pause_by_generation_s: list
    collections_per_epoch: list     # mean per generation (a median of whole counts reads 0 for one epoch in three)
    objects: Objects | None
    site: str | None                # the Python line whose memory grew most (deep capture)
    policy: str | None = None       # the run's --gc-policy (manual:N: these are its own collections)
    forced: Forced | None = None    # None: the run predates their capture


@dataclass
class GcBetweenEpochs:
    """Collections between the analysed epochs (a script's own gc.collect() after each one, what an
    evaluation or a checkpoint allocates): outside every epoch's time, inside the job's."""
    pause_s: float
    collections: list               # per generation, over the run
    intervals: int                  # the gaps between epochs they fall in (one before each analysed epoch)
    epochs_s: float                 # the analysed epochs' time...
    between_s: float                # ...and the time between them: share = pause_s / (epochs_s + between_s)
    share: float
    generation: int                 # the generation with the most pause time
    objects: Objects | None
    policy: str | None = None
    forced: Forced | None = None    # None: the run predates their capture


@dataclass
class GcSpikes:
    spikes: object                  # spikes.Spikes
    every: float                    # items between spikes of the generation with the most pause, on average
    objects: Objects | None
    site: str | None
    policy: str | None = None
    forced: Forced | None = None
    growing: str | None = None      # the finding that shows the heap its full collections walk growing:
                                    # gc-growing-pauses, or allocation-growth to the end (None: neither)


@dataclass
class PauseGrowth:
    source: str                     # "gc_events" (every full collection) or "epochs" (mean per epoch)
    collections: int
    first_s: float                  # fitted duration of a full collection at the first one...
    last_s: float                   # ...and at the last
    change: stats.Change
    growth_s_per_hour: float
    uptime_s: float                 # at the last collection, counted in the analysed epochs (training_clock)
    hours_to_one_second: float | None   # uptime at which the trend reaches 1 s per full collection
    excess_s: float                 # pause time above the first fitted duration (spikes' time included)
    objects: Objects | None
    site: str | None
    forced: Forced | None = None
    policy: str | None = None       # the run's --gc-policy


@dataclass
class MemoryGrowth:
    measure: str                    # "rss", "malloc" or "traced": the series that grows
    growth_bytes_per_epoch: float
    total_growth_bytes: float
    start_bytes: float
    end_bytes: float
    levels_off: bool                # the last third grows at under LEVELS_OFF of the overall rate
    rss_growth_bytes_per_epoch: float
    malloc_growth_bytes_per_epoch: float | None
    traced_growth_bytes_per_epoch: float | None
    top_sites: list = field(default_factory=list)
    sites_share: float | None = None   # of the growth per epoch, the share the sites' growth per traced epoch is
    traced_epochs: int = 0          # the epochs deep capture traced (the sites' source)
    snapshots: int | None = None    # the analysed epochs that took a snapshot (None: recorded before records said)
    deep: object = None             # the run's tracemalloc setting: False, True or "auto" (None: not recorded)


@dataclass
class MemoryTrend:
    """Anonymous memory (RSS less its shared pages: a memory-mapped dataset's file pages are no
    leak) through the analysed epochs' time, from the readings inside them (rundir.Run.rss_samples):
    the memory trend of a run whose epochs are too few to fit one. Levels are medians of readings:
    the first tenth's, the first third's and the last tenth's; gains and frees are the rises and
    drops between RSS_TREND_BINS bin medians, in time order."""
    shape: str                      # "grows" (to the end: the finding), "levels" (stopped by the last third),
                                    # "step" (one rise holds most of the growth), "cycles" (it frees much of
                                    # what it gains), "early" (rose in the first third, then held), "flat"
    start_bytes: float
    early_bytes: float              # the first third's level
    end_bytes: float
    late_bytes_per_s: float         # the Theil-Sen slope of the last third of the readings
    gained_bytes: float             # the rises, summed...
    freed_bytes: float              # ...and the drops
    largest_rise_bytes: float       # the largest rise from one reading to the next after the first third
    span_s: float                   # from the first reading to the last
    samples: int
    epochs: int                     # the analysed epochs they were read in
    limit_bytes: float              # growth after the first third that counts as growing memory
    stopped_in: bool = False        # the readings of the epoch the run stopped in follow theirs

    @property
    def levels_off(self):
        return self.shape == "levels"


@dataclass
class OpGrowth:
    name: str
    tags: dict
    early_s: float                  # median seconds per epoch, early window
    late_s: float
    growth_s: float
    calls_per_epoch: float
    change: stats.Change


@dataclass
class ComputeGrowth:
    change: stats.Change            # of epoch time (of step time when unit is "step")
    excess_s: float                 # time above the early median over the run
    gc_explained_fraction: float
    ops: list                       # OpGrowth that grew, most first
    ops_recorded: bool
    unit: str = "epoch"             # "step": epochs too few to fit a trend, the steps' trend instead


@dataclass
class WorkerMemory:
    count: int
    uss_bytes: int
    pss_bytes: int
    parent_rss_bytes: int
    uss_growth_bytes_per_epoch: float   # trend of the USS of the workers that carried over from epoch to epoch
    worker_growth_bytes: int            # most one worker's USS grew since it was first seen
    batches_bytes: int                  # what a clean worker's batches in flight can hold (0: not recorded)
    trend: bool                         # the carried-over workers' USS grows over the run
    grew: bool                          # a worker's USS grew by WORKER_GROWTH_BYTES, and past batches_bytes,
                                        # since it was first seen
    near_parent: bool
    worker_gc_copied_bytes: int         # most one worker's own first full collection copied (0: none recorded)
    collector: bool                     # a worker's own first full collection copied WORKER_GC_COPY_BYTES or more
    read: bool                          # reading copied pages: no such collection's copy, or a trend (a copy
                                        # happens once), or what a worker grew (or holds) beyond that copy
                                        # passes the `grew` limit


@dataclass
class InputWait:
    share: float            # of the analysed epochs' time, the training thread's wait for DataLoader batches
    wait_s: float           # the mean wait for a batch
    batches: int
    wall_s: float           # the analysed epochs' time
    workers: int | None     # child processes (DataLoader workers) at the last epoch's sample; None: not recorded
    persistent: bool = False  # they carried over from the epoch before (persistent_workers=True)
    spawned: int = 0        # of them, those that exec'd a program, where none was forked and a DataLoader had
                            # workers (the spawn method's, multiprocessing's resource tracker with them): whether
                            # they carry over is not recorded


@dataclass
class Finding:
    cause: str              # "gc", "allocation" or "compute"
    pattern: str            # see the module docstring
    time_fraction: float    # share of the run's wall time the finding costs (0 for memory that costs none yet)
    evidence: object        # one of the evidence dataclasses above


def rank(findings):
    """Costliest first; memory that grows leads when nothing costs MEANINGFUL of the run."""
    return sorted(findings, key=lambda f: (f.time_fraction >= MEANINGFUL, f.cause == "allocation",
                                           f.time_fraction), reverse=True)


# -- evidence ------------------------------------------------------------------------------------

def growth_rate(x, y):
    """Theil-Sen growth of y per unit of x, over the points that exist (None if fewer than 2)."""
    points = [(a, b) for a, b in zip(x, y) if b is not None]
    if len(points) < 2:
        return None
    return stats.slope(*zip(*points)) if len(points) >= 3 else (points[1][1] - points[0][1]) / max(
        points[1][0] - points[0][0], 1)


def objects(records, every):
    """Objects evidence from gc.tracked and, in deep mode, heap.top_types (None if neither was
    sampled): the growth from `records` (after the warm-up), the count the latest of `every` epoch
    (a count, not a time: a big heap's only count may fall in the warm-up, its budget allowing one)."""
    tracked = [(r["epoch"], sum(r["gc"]["tracked"])) for r in records if r["gc"].get("tracked")]
    latest, latest_epoch = next(((sum(r["gc"]["tracked"]), r["epoch"]) for r in reversed(every)
                                 if r["gc"].get("tracked")), (None, None))
    typed = [(r["epoch"], r["heap"]["top_types"], r["heap"].get("types_epochs")) for r in records
             if (r.get("heap") or {}).get("top_types")]
    if latest is None and not typed:
        return None
    result = Objects(tracked=None if latest is None else int(latest),
                     tracked_growth_per_epoch=growth_rate(*zip(*tracked)) if len(tracked) >= 2 else None,
                     tracked_epoch=latest_epoch, last_epoch=every[-1]["epoch"])
    if typed:
        last_epoch, last = typed[-1][0], typed[-1][1]
        top = max(last, key=lambda t: t["count"])
        # the share is of the objects tracked when the types were counted: that epoch's count, else the
        # latest count; never below the types' own sum (a count from before a growing heap's is short)
        at = next((sum(r["gc"]["tracked"]) for r in every if r["epoch"] == last_epoch and r["gc"].get("tracked")), None)
        total = max(at or result.tracked or 0, sum(t["count"] for t in last))
        diffs = sum(t["count_diff"] for _, types, _ in typed for t in types if t["type"] == top["type"])
        # each count diffs against the one before it (a window's start, the previous snapshot):
        # the epochs they cover, as recorded (runs written before types_epochs: first to last count)
        covered = [n for _, _, n in typed]
        span = sum(covered) if all(covered) else max(typed[-1][0] - typed[0][0], 1)
        result.top_type, result.top_type_share = top["type"], top["count"] / total if total else None
        result.top_type_growth_per_epoch = diffs / span
        result.top_type_site = next((t.get("site") for _, types, _ in reversed(typed) for t in types
                                     if t["type"] == top["type"] and t.get("site")), None)
    return result


def top_sites(records, n=10):
    totals = {}
    for r in records:
        for s in ((r.get("heap") or {}).get("top_growth") or []):
            entry = totals.setdefault(s["site"], Site(s["site"], 0, 0, s.get("kind", "python")))
            entry.size_diff += int(s["size_diff"])
            entry.count_diff += int(s.get("count_diff", 0))
    return sorted((s for s in totals.values() if s.size_diff > 0), key=lambda s: -s.size_diff)[:n]


def python_site(sites):
    return next((s.site for s in sites if s.kind == "python"), None)


def forced(records):
    """The program's own collections over `records` (None when they were not recorded: runs
    written before the capture told them apart)."""
    gcs = [r["gc"] for r in records if "forced" in r["gc"]]
    if not gcs:
        return None
    sites, via = {}, {}
    for g in gcs:
        for s in g.get("forced_sites") or []:
            sites[s["site"]] = sites.get(s["site"], 0.0) + s["pause_s"]
            via.setdefault(s["site"], s.get("via"))
    ranked = sorted(sites, key=lambda site: -sites[site])
    counts, pause = np.sum([g["forced"] for g in gcs], axis=0), np.sum([g["forced_pause_s"] for g in gcs], axis=0)
    total = sum(sum(g["pause_s"]) for g in gcs)
    return Forced(share=float(pause.sum() / total) if total > 0 else 0.0, pause_s=float(pause.sum()),
                  collections_per_epoch=(counts / len(gcs)).tolist(), site=ranked[0] if ranked else None,
                  sites=ranked, via=via.get(ranked[0]) if ranked else None, collections=counts.tolist(),
                  generation=int(np.argmax(pause)),
                  only=bool(counts.sum() > 0 and counts.sum() == sum(sum(g["collections"]) for g in gcs)),
                  # a full list that holds fewer calls than the epoch made: its other lines were left out (a
                  # shorter list's missing calls are those whose line could not be told)
                  more_sites=any(len(g["forced_sites"]) >= FORCED_SITES
                                 and sum(s["collections"] for s in g["forced_sites"]) < sum(g["forced"])
                                 for g in gcs if g.get("forced_sites")))


def forced_leads(evidence):
    """Whether a GC finding's remedy is the program's own gc.collect() calls': they take FORCED_LEADS
    of the GC pause and, for spikes, hold at least half of those with a collection of the spikes'
    generation (one gc.collect() an epoch outside the steps does not make automatic collections'
    spikes its own). Under --gc-policy manual:N, which turns automatic collection off and collects
    between steps, a collection inside a step is the program's: the step spikes' remedy is theirs
    whatever their share of the pause, if they hold half of the spikes."""
    f = evidence.forced
    spikes = getattr(evidence, "spikes", None)
    in_steps = ((getattr(evidence, "policy", None) or "").startswith("manual:") and spikes is not None
                and spikes.unit == "step")
    if f is None or (f.share < FORCED_LEADS and not (in_steps and f.collections[spikes.generation])):
        return False
    return spikes is None or 2 * f.collections[spikes.generation] >= spikes.count_by_generation[spikes.generation]


# -- detectors -----------------------------------------------------------------------------------

def spike_counted(spikes):
    """Whether the spikes are a finding of their own (their GC time is theirs, not steady GC's)."""
    return (spikes.count > 0 and spikes.time_fraction >= SPIKE_FRACTION
            and spikes.gc_explained_fraction >= SPIKE_GC_EXPLAINS)


def gc_spikes(spikes, objs, site, policy=None, forced=None, growing=None):
    if not spike_counted(spikes):
        return None
    paused = spikes.count_by_generation[spikes.generation] or spikes.count
    return Finding("gc", "gc-spikes", spikes.time_fraction * spikes.gc_explained_fraction,
                   GcSpikes(spikes, spikes.total / paused, objs, site, policy, forced, growing))


def training_clock(records, t=None):
    """Times `t` on the run's clock (each inside an epoch of `records`), or the epochs' ends when t is
    None, as uptime: the first epoch's start on the run's clock plus the epochs' time since. The time
    between them (an evaluation, a script's own gc.collect()) and the epochs left out (deep capture's
    traced ones, 10-150x slower) would stretch the axis a trend in pauses is fitted on. Records
    without start_s: t as it is, or the epochs' walls summed."""
    walls = np.array([r["wall_s"] for r in records], float)
    starts = [r.get("start_s") for r in records]
    if None in starts:
        return np.cumsum(walls) if t is None else np.asarray(t, float)
    starts = np.array(starts, float)
    order = np.argsort(starts)
    starts, walls = starts[order], walls[order]
    before = starts[0] + np.concatenate(([0.0], np.cumsum(walls)[:-1]))   # each epoch's start on the new clock
    if t is None:
        return (before + walls)[np.argsort(order)]
    last = np.maximum(stats.within(starts, walls, t)[0], 0)
    return before[last] + np.clip(np.asarray(t, float) - starts[last], 0.0, walls[last])


def pause_growth(events, records, spikes, objs, site, forced=None, policy=None):
    """Full collections that take longer with uptime: from gc_events.bin when it holds enough of
    them, else from each epoch's mean generation-2 pause. The growth that falls inside spikes is
    the spikes' time already; time_fraction is the rest."""
    full = events[events["generation"] == 2] if len(events) else events
    if len(full) >= MIN_EVENTS:
        source = "gc_events"
        x, y = training_clock(records, full["start_s"]), np.asarray(full["duration_s"], float)
    else:
        source = "epochs"
        ends = training_clock(records)
        rows = [(ends[i], r["gc"]["pause_s"][2] / r["gc"]["collections"][2])
                for i, r in enumerate(records) if r["gc"]["collections"][2]]
        if len(rows) < MIN_EVENTS:
            return None
        x, y = np.array([t for t, _ in rows]), np.array([p for _, p in rows])
    change = stats.change(x, y)
    if not change.sustained or change.relative < PAUSE_GROWTH:
        return None
    trend = stats.theil_sen(*stats.binned(x, y))
    if source == "gc_events":
        excess = float(np.clip(y - trend.start, 0, None).sum())
    else:
        counts = np.array([r["gc"]["collections"][2] for r in records if r["gc"]["collections"][2]], float)
        excess = float((np.clip(y - trend.start, 0, None) * counts).sum())
    wall_s = spikes.wall_s
    if trend.end - trend.start < PAUSE_GROWTH_S and excess < MEANINGFUL * wall_s:
        return None
    hours = None
    if trend.slope > 0:
        hours = max(float(x[-1]), float(x[0]) + (1.0 - trend.start) / trend.slope) / 3600
    full_s = spikes.gc_by_generation_s[2]
    in_spikes = spikes.spike_gc_by_generation_s[2] / full_s if full_s > 0 and spike_counted(spikes) else 0.0
    return Finding("gc", "gc-growing-pauses", excess * max(1 - in_spikes, 0.0) / wall_s if wall_s > 0 else 0.0,
                   PauseGrowth(source=source, collections=len(y), first_s=trend.start, last_s=trend.end, change=change,
                               growth_s_per_hour=trend.slope * 3600, uptime_s=float(x[-1]),
                               hours_to_one_second=hours, excess_s=excess, objects=objs, site=site, forced=forced,
                               policy=policy))


def gc_steady(records, spikes, growth_s, objs, site, policy=None, forced=None):
    """GC time outside the spikes and the pause growth (growth_s: the growth's own time)."""
    wall_s = spikes.wall_s
    spike_part = min(spikes.spike_gc_s, spikes.excess_s) if spike_counted(spikes) else 0.0
    steady = max(spikes.gc_s - spike_part - growth_s, 0.0)
    if wall_s <= 0 or steady / wall_s < MEANINGFUL:
        return None
    by_gen = spikes.gc_by_generation_s
    collections = np.mean(np.array([r["gc"]["collections"] for r in records], float).reshape(-1, 3), axis=0)
    return Finding("gc", "gc-steady", steady / wall_s,
                   GcSteady(share_total=spikes.gc_s / wall_s, steady_s=steady, wall_s=wall_s,
                            generation=int(np.argmax(by_gen)), pause_by_generation_s=list(by_gen),
                            collections_per_epoch=collections.tolist(), objects=objs, site=site, policy=policy,
                            forced=forced))


def between_epochs(records, objs=None, policy=None):
    """GC pauses between epochs: over the `records` that hold the program's time since the epoch
    before (gap_s) and its collections then (gc_before, absent for none); None when none holds it
    (the first epoch of a run, runs written before they were recorded)."""
    gapped = [r for r in records if r.get("gap_s") is not None]
    if not gapped:
        return None
    before = [r["gc_before"] for r in gapped if r.get("gc_before")]
    pause_by_gen = np.sum([b["pause_s"] for b in before], axis=0) if before else np.zeros(3)
    epochs_s, between_s = float(sum(r["wall_s"] for r in gapped)), float(sum(r["gap_s"] for r in gapped))
    span, pause = epochs_s + between_s, float(pause_by_gen.sum())
    forced_between = forced([{"gc": b} for b in before])
    if forced_between is not None:   # per gap, those without a collection too; "only": in the epochs as well
        counts = np.array(forced_between.collections, float)
        inside = forced(records)
        forced_between = replace(forced_between, collections_per_epoch=(counts / len(gapped)).tolist(),
                                 only=forced_between.only and (inside is None or inside.only or not any(
                                     sum(r["gc"]["collections"]) for r in records)))
    collections = np.sum([b["collections"] for b in before], axis=0).tolist() if before else [0, 0, 0]
    return GcBetweenEpochs(pause_s=pause, collections=collections, intervals=len(gapped), epochs_s=epochs_s,
                           between_s=between_s, share=min(pause / span, 1.0) if span > 0 else 0.0,
                           generation=int(np.argmax(pause_by_gen)), objects=objs, policy=policy, forced=forced_between)


def gc_between_epochs(between):
    """A finding when GC pauses between the epochs take MEANINGFUL of the epochs' time and the gaps'
    together."""
    if between is None or between.share < MEANINGFUL:
        return None
    return Finding("gc", "gc-between-epochs", between.share, between)


def memory_series(records):
    """{"rss", "malloc", "traced"}: each epoch's bytes (None where not recorded). RSS and malloc are
    None in the epochs deep capture traced when the others are the majority (load.timed):
    tracemalloc's own traces grow them (a probe's 1.6 MiB an epoch read 10.9 over two traced ones)."""
    kept = set(timed(records))
    return {"rss": [r["rss_bytes"] if i in kept else None for i, r in enumerate(records)],
            "malloc": [r.get("malloc_bytes") if i in kept else None for i, r in enumerate(records)],
            "traced": [(r.get("heap") or {}).get("traced_bytes") for r in records]}


def level_rise(values):
    """How far the median of the last third of `values` lies above the first third's, when that is
    more than LEVEL_NOISE times their mean move from one epoch to the next, else 0.0 (also with
    under six values): growth that a slope over every epoch misses when it stopped before the end, a
    cache that filled and then held. Noise moves every epoch and a level that rose once or a few
    times moves little: an RSS that jumps at random between two levels 20 MiB apart moves ~10 MiB an
    epoch, and its thirds' medians are often those two levels."""
    third = len(values) // 3
    if third < 2:
        return 0.0
    values = np.asarray(values, float)
    rise = float(np.median(values[-third:]) - np.median(values[:third]))
    return rise if rise > LEVEL_NOISE * float(np.mean(np.abs(np.diff(values)))) else 0.0


def memory_rates(records):
    """Growth in bytes per epoch of each memory series (None when it was not recorded)."""
    idx = [r["epoch"] for r in records]
    return {k: (window_growth_rate if k == "traced" else growth_rate)(idx, v)
            for k, v in memory_series(records).items()}


def window_growth_rate(x, y):
    """growth_rate of traced memory, within the runs of consecutive traced epochs: auto capture
    starts tracemalloc afresh for each window, so traced bytes fall back between windows. Each
    window's points are moved to start at (0, 0) and all are fitted together; None from fewer than
    three points, since two traced epochs differ by what each held at its end (a probe's two read
    "traced -13.0 MiB per epoch" beside malloc growing 12.5)."""
    shifted, first, last = [], None, None
    for a, b in zip(x, y):
        if b is None:
            continue
        if last is None or a != last + 1:   # a new window
            first = (a, b)
        shifted.append((a - first[0], b - first[1]))
        last = a
    return growth_rate(*zip(*sorted(shifted))) if len(shifted) >= 3 else None   # in x order, as the fit bins them


def rss_limit(records):
    """RSS growth over the run that counts as growing memory."""
    return max(RSS_LEAK_BYTES, RSS_LEAK_SHARE * float(records[0]["rss_bytes"] or 0))   # None: read from its steps


def memory_growth(records, sites, sited, deep=None):
    """Growing RSS, malloc or traced memory (the first that grows past its threshold); `sites` are
    the growth of the snapshots in the records `sited` (the warm-up's when it holds them all); deep:
    the run's tracemalloc setting."""
    idx = np.array([r["epoch"] for r in records], float)
    if len(idx) < MEMORY_MIN_EPOCHS:
        return None
    series, rates = memory_series(records), memory_rates(records)
    span = idx[-1] - idx[0]
    limits = {"traced": TRACED_LEAK_BYTES, "malloc": RSS_LEAK_BYTES, "rss": rss_limit(records)}
    for measure in ("traced", "malloc", "rss"):
        rate = rates[measure]
        if rate is None:
            continue
        points = [(x, y) for x, y in zip(idx, series[measure]) if y is not None]
        if measure != "traced" or points[-1][0] - points[0][0] == len(points) - 1:   # not across capture windows
            rate = max(rate, level_rise([y for _, y in points]) / max(span, 1))
        if rate * span < limits[measure]:
            continue
        third = points[-max(3, len(points) // 3):]
        fit = window_growth_rate if measure == "traced" else growth_rate
        late_rate = fit(*zip(*third)) if len(third) >= 2 else rate
        heaps = [r["heap"] for r in sited if r.get("heap") is not None]   # every traced epoch: snapshots cover them all
        traced = len(heaps)
        share = sum(s.size_diff for s in sites) / traced / rate if sites and traced else None
        analysed = [r["heap"] for r in records if r.get("heap") is not None]   # not the warm-up's
        snapshots = sum(bool(h.get("snapshot")) for h in analysed) if all("snapshot" in h for h in analysed) else None
        return Finding("allocation", "allocation-growth", 0.0, MemoryGrowth(
            measure=measure, growth_bytes_per_epoch=rate, total_growth_bytes=rate * span,
            start_bytes=float(points[0][1]), end_bytes=float(points[-1][1]),
            levels_off=bool(late_rate is not None and late_rate < LEVELS_OFF * rate),
            rss_growth_bytes_per_epoch=rates["rss"], malloc_growth_bytes_per_epoch=rates["malloc"],
            traced_growth_bytes_per_epoch=rates["traced"], top_sites=sites,
            sites_share=None if share is None else float(share), traced_epochs=traced, deep=deep,
            snapshots=snapshots))
    return None


def rss_trend(samples, records, stopped_s=None):
    """MemoryTrend of the readings (samples: format.RSS_DTYPE) taken in `records`, each an epoch's
    from its start (an index a dropped epoch left free is taken again by the next: its readings
    come before), None with fewer than RSS_TREND_SAMPLES or no time between the first and the last
    (or no records, MEMORY_MIN_EPOCHS or more, which their own readings judge, or records written
    before start_s). stopped_s: when the epoch the run stopped
    in began, an epoch after them not in `records` (load.stopped_start: failed, killed); its
    readings (a later index, from then on) count too: memory climbing to an OOM kill is in it."""
    starts = {r["epoch"]: r.get("start_s") for r in records}
    if not records or len(records) >= MEMORY_MIN_EPOCHS or None in starts.values():
        return None
    begun = np.array([starts.get(e, np.inf) for e in samples["epoch"].tolist()])
    mine = samples["t_s"] >= begun
    last = max(records, key=lambda r: r["start_s"])
    later = (samples["epoch"] > last["epoch"]) & (samples["t_s"] >= (np.inf if stopped_s is None else stopped_s))
    mine |= later
    t, epoch = samples["t_s"][mine], samples["epoch"][mine]
    anon = (samples["rss_bytes"][mine] - samples["shared_bytes"][mine]).astype(float)
    if len(t) < RSS_TREND_SAMPLES or t[-1] <= t[0]:
        return None
    span = float(t[-1] - t[0])
    third, tenth = max(3, len(t) // 3), max(1, len(t) // 10)
    start, early, end = (float(np.median(part)) for part in (anon[:tenth], anon[:third], anon[-tenth:]))
    moves = np.diff(stats.binned(np.arange(len(t)), anon, RSS_TREND_BINS)[1])   # bin medians: noise tamed
    # a step is one reading's rise, beyond the readings' noise (a bin can split it in two)
    rises = np.diff(anon)
    largest = float(rises[third - 1:].max(initial=0.0))
    noise = float(np.median(np.abs(rises)))
    after, limit = end - early, max(RSS_LEAK_BYTES, RSS_LEAK_SHARE * start)
    late = stats.slope(t[-third:], anon[-third:])
    freed = float(-moves[moves < 0].sum())
    gained = float(moves[moves > 0].sum())
    if min(gained, freed) >= limit and freed > max(after, 0.0) / 2:
        shape = "cycles"
    elif after < limit:   # a rise past the limit, then: mostly in the first third
        shape = "early" if end - start >= limit else "flat"
    elif largest > after / 2 and largest > STEP_NOISE * noise:
        shape = "step"
    elif late < LEVELS_OFF * after / (span * 2 / 3):
        shape = "levels"
    else:
        shape = "grows"
    return MemoryTrend(shape=shape, start_bytes=start, early_bytes=early, end_bytes=end, late_bytes_per_s=late,
                       gained_bytes=gained, freed_bytes=freed,
                       largest_rise_bytes=largest, span_s=span, samples=int(len(t)),
                       epochs=int(len(np.unique(epoch[epoch <= last["epoch"]]))), limit_bytes=limit,
                       stopped_in=bool(later.any()))


def rss_growth(trend):
    """allocation-growth from a trend of anonymous memory through the epochs' time (a MemoryTrend,
    or None) that keeps growing to the end."""
    return Finding("allocation", "allocation-growth", 0.0, trend) if trend is not None and trend.shape == "grows" \
        else None


def op_growth(records, op_series):
    """Per op: early and late median seconds per epoch and its change, most growth first."""
    idx = np.array([r["epoch"] for r in records], float)
    rows = []
    for op, (seconds, calls) in op_series.items():
        early, late = stats.early_late(seconds)
        rows.append(OpGrowth(op.name, op.tag_dict(), early, late, late - early, float(np.median(calls)),
                             stats.change(idx, seconds)))
    return sorted(rows, key=lambda r: -r.growth_s)


def gc_explained(records, epoch_change):
    """Share of the late - early median epoch-time difference that GC pauses explain."""
    gc_early, gc_late = stats.early_late([sum(r["gc"]["pause_s"]) for r in records])
    delta = epoch_change.late - epoch_change.early
    return float(np.clip((gc_late - gc_early) / delta, 0.0, 1.0)) if delta > 0 else 0.0


def compute_growth(records, epoch_change, explained, ops, timed):
    """The time epochs spent above the early median, of the epochs `timed` (indices: those the trend
    was fitted on; deep capture's traced epochs are slower by the profiler's own work), against
    the whole run's time."""
    if not (epoch_change.sustained and epoch_change.relative > 0) or explained >= GC_EXPLAINS:
        return None
    wall = np.array([r["wall_s"] for r in records])
    excess = float(np.clip(wall[timed] - epoch_change.early, 0, None).sum())
    grown = [o for o in ops if o.growth_s > 0 and o.change.sustained and o.change.relative > 0]
    return Finding("compute", "compute-growth", excess * (1 - explained) / wall.sum(),
                   ComputeGrowth(epoch_change, excess, explained, grown[:3], bool(ops)))


def step_compute_growth(trend, wall_s, ops):
    """compute-growth from the steps' trend (a StepTrend), for a run whose epochs are too few to fit one;
    `wall_s` the analysed epochs' time."""
    change = trend.change
    if not (change.sustained and change.relative > 0) or trend.gc_explained >= GC_EXPLAINS or wall_s <= 0:
        return None
    return Finding("compute", "compute-growth", trend.excess_s * (1 - trend.gc_explained) / wall_s,
                   ComputeGrowth(change, trend.excess_s, trend.gc_explained, [], bool(ops), unit="step"))


def op_total(records, name):
    """(seconds, calls) of the untagged op `name` over `records`, or None when it was never timed."""
    timed = [(op["total_s"], op["calls"]) for r in records for op in (r.get("ops") or {}).values()
             if op.get("name") == name and not op.get("tags")]
    return (float(sum(s for s, _ in timed)), int(sum(n for _, n in timed))) if timed else None


def data_waits(records):
    """(seconds, batches) the training thread waited for torch DataLoader batches in `records` (the op
    format.DATALOADER_OP), or None when none was timed."""
    return op_total(records, DATALOADER_OP)


def input_wait(records):
    """input-wait: the training thread waits for its DataLoader's batches INPUT_WAIT of the epochs' time."""
    waits, wall = data_waits(records), float(sum(r["wall_s"] for r in records))
    if waits is None or wall <= 0 or waits[0] / wall < INPUT_WAIT:
        return None
    seconds, batches = waits
    sampled = next((r["workers"] for r in reversed(records) if r.get("workers")), None)
    # spawned children are workers where no forked one is and a DataLoader with workers weighed a batch
    # (the spawn method's); else multiprocessing's resource tracker or a subprocess of the script's
    spawned = int(sampled.get("spawned", 0)) if sampled and not sampled["count"] and "batch_bytes" in sampled else 0
    evidence = InputWait(seconds / wall, seconds / max(batches, 1), batches, wall,
                         int(sampled["count"] + spawned) if sampled else None,
                         bool(sampled and sampled["count"] and sampled.get("new") == 0), spawned)
    return Finding("compute", "input-wait", evidence.share, evidence)


def worker_memory(records):
    rows = [(r["epoch"], r["workers"], r["rss_bytes"]) for r in records if r.get("workers")]
    if not rows or not rows[-1][1]["count"]:
        return None
    epoch, last, parent = rows[-1]
    # the trend: the workers that carried over from the epoch before (runs recorded before "new" and
    # "carried_uss_bytes": every worker, as then)
    carried = [(e, w.get("carried_uss_bytes", w["uss_bytes"])) for e, w, _ in rows
               if w["count"] > w.get("new", 0)]
    rate = growth_rate([e for e, _ in carried], [u for _, u in carried]) or 0.0
    span = carried[-1][0] - carried[0][0] if carried else 0
    trend = len(carried) >= 4 and rate * span >= max(RSS_LEAK_BYTES, RSS_LEAK_SHARE * carried[0][1])
    # one worker's growth since it started (forked anew every epoch, or persistent): a clean torch
    # worker of a TensorDataset grew up to 4 MB, or 7-10 MB, in a pass here, with no full collection in it
    worker = int(max(w.get("uss_growth_max_bytes", (w.get("uss_growth_bytes") or 0) // max(w["count"], 1))
                     for _, w, _ in rows))
    # a clean worker holds its own batches: the one it collates, its samples, and up to prefetch_factor
    # made and not yet taken by the parent (a worker making 40 MB batches grew 86-130 MiB in a pass)
    batches = max((((w.get("prefetch_factor") or PREFETCH_DEFAULT) + 2) * w["batch_bytes"]
                   for _, w, _ in rows if w.get("batch_bytes")), default=0)
    grew = worker >= max(WORKER_GROWTH_BYTES, batches)
    near = last["uss_bytes"] / last["count"] - batches >= WORKER_SHARE * parent
    # a worker's own first full collection copies every page of the parent's objects, read or not
    # (gc.freeze() stops it), once; the child measures it, however late the parent first sees the child
    gc_copied = max(w.get("gc_copied_max_bytes", 0) for _, w, _ in rows)
    collector = gc_copied >= WORKER_GC_COPY_BYTES
    flagged = worker if grew else last["uss_bytes"] / last["count"]
    read = not collector or trend or flagged - gc_copied >= max(WORKER_GROWTH_BYTES, batches)
    evidence = WorkerMemory(int(last["count"]), int(last["uss_bytes"]), int(last["pss_bytes"]), int(parent),
                            float(rate), worker, int(batches), bool(trend), bool(grew), bool(near), int(gc_copied),
                            bool(collector), bool(read))
    if not (trend or grew or near or gc_copied >= WORKER_GROWTH_BYTES):
        return None
    return Finding("allocation", "worker-copy-on-read", 0.0, evidence)
