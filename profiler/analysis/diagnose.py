"""analyze(run_dir) -> Diagnosis: is the run slow or getting slower, why, and what it costs.

Every finding (profiler.analysis.findings) is computed with the share of the run's time it costs;
they are ranked, and `primary_cause` is the cause of the first. The summaries beside them
(epoch_time, gc, allocation, steps, workers) are the numbers in docs/findings.md and
shared/ARCHITECTURE.md. Nothing here writes a sentence: profiler.report renders the Diagnosis.
"""

from dataclasses import dataclass, field, replace

import numpy as np

from .. import rundir
from ..rundir.ranks import is_multi_rank
from . import findings as fnd
from . import spikes as spk
from . import stats
from .load import cut_short, gapped, load, one_size, stopped_start, timed as timed_epochs
from .ops import followed, op_index, op_series, op_time


@dataclass
class EpochTime:
    early_median_s: float
    late_median_s: float
    ratio: float                # late / early
    change: stats.Change        # fitted relative change with its 95% interval
    slowdown: bool              # a sustained slowdown
    faster: bool                # a sustained speed-up
    warmup_epochs_skipped: int
    steady: bool = True         # neither, and the fitted change's 95% interval and late / early within STEADY_BAND
                                # (False when no trend was fitted)
    swings: bool = False        # neither, but late / early outside STEADY_BAND: too noisy to tell a trend
    traced_epochs: int = 0      # deep capture's traced epochs left out of the trend (load.timed)...
    traced_slowdown: float | None = None   # ...and their median time over the others' (what tracemalloc cost)
    step_trend: object = None   # StepTrend: the steps' trend, when the epochs are too few to fit one
    between_share: float | None = None   # of the analysed epochs' time and the gaps before them, the gaps'
                                         # (an evaluation, a checkpoint, waiting for other ranks); None: no gap_s
    setup_epochs: int = 0       # of warmup_epochs_skipped, the set-up's (epochs before the first step)
    cut_short: tuple | None = None   # (epoch, its steps, the others' median steps): the last epoch, cut short
                                     # (load.cut_short), left out of the trend
    same_steps: tuple | None = None  # (steps, epochs, all the analysed epochs' fewest and most steps): where their
                                     # steps differ (fit calls of other batch sizes), the longest run of epochs of
                                     # about one number of steps, which the trend is fitted over


@dataclass
class StepTrend:
    """The trend of step time over a run's steps, fitted as epochs' is, each point the median of a run
    of consecutive steps: a run of one long epoch (an LLM's, a --epoch-fn train) tells its slowdown."""
    change: stats.Change        # of the median step
    steps: int
    excess_s: float             # the steps' time above the early mean step, over the run
    gc_explained: float         # of the late - early difference of the mean step, its GC's share


@dataclass
class GcSummary:
    share_early: float          # median GC share of epoch time, early window
    share_late: float
    explained_fraction: float   # share of the late - early epoch-time difference GC explains
    share_total: float          # all GC pause / all wall time (of the epochs the findings weigh)
    generation: int             # the generation with the most pause time
    full_collections_per_epoch: float
    tracked: int | None         # GC-tracked objects at the end, when sampled
    forced_share: float | None = None   # of all GC pause, the program's own gc.collect() calls' (None: not recorded)
    share_between: float | None = None  # GC pause between the epochs / their time and the gaps' (findings.
                                        # between_epochs; None: no epoch after the run's first was analysed,
                                        # or a run written before gaps were recorded)


@dataclass
class Allocation:
    rss_growth_bytes_per_epoch: float | None   # None: one epoch after the warm-up, no growth to fit
    traced_growth_bytes_per_epoch: float | None
    malloc_growth_bytes_per_epoch: float | None
    rss_start_bytes: float | None   # None: a killed run read from its steps (rundir.Run.epochs)
    rss_end_bytes: float | None
    top_sites: list             # [findings.Site]
    epochs: int                 # epochs the rates are fitted over (after the warm-up)...
    span_epochs: float          # ...from the first index to the last
    rss_limit_bytes: float      # RSS growth over the run that counts as growing memory
    rss_rise_bytes: float = 0.0   # the rise of RSS's level, its last third's over its first (findings.level_rise)
    rss_trend: object = None    # findings.MemoryTrend: anonymous RSS through the epochs' time, read about once a
                                # second inside them, when they are too few to fit a growth per epoch (None: fewer
                                # readings)


@dataclass
class StepSummary:
    count: int
    median_s: float
    p99_s: float
    spike_time_fraction: float
    gc_explained_fraction: float


@dataclass
class Workers:
    count: int
    private_bytes: int          # USS of all child processes (forked and spawned), last epoch
    spawned: int = 0            # of them, those that exec'd a program (spawned workers, a subprocess)


@dataclass
class RankOf:
    """One rank's run of a multi-rank job, read alone: it shows what it waited for, not for whom."""
    rank: int
    world_size: int
    job_dir: str | None   # the directory holding the job's ranks, when the run's parent is it


@dataclass
class Diagnosis:
    run_dir: str
    epochs: int
    status: str
    complete: bool
    problems: list
    epoch_time: EpochTime
    primary_cause: str          # "none", "gc", "allocation" or "compute"
    gc: GcSummary
    allocation: Allocation
    steps: StepSummary | None
    findings: list              # [findings.Finding], ranked
    ops: list                   # [findings.OpGrowth], most growth first
    workers: Workers | None
    spikes: spk.Spikes          # over steps when recorded, else epochs
    ranks: int | None = None    # multi-rank runs
    stragglers: object = None   # multi-rank runs: ranks.Straggler or None
    rank_analysis: object = None  # multi-rank runs: ranks.RankAnalysis (per-rank summary, lost time)
    meta: dict = field(default_factory=dict)
    cautions: list = field(default_factory=list)  # what the run's records leave out (rundir.Run.cautions)
    unfinished: bool = False    # its last epoch, the only one with steps, is the one it stopped in (rundir.Run.epochs)
    rank_of: RankOf | None = None   # one rank's run of a multi-rank job, read alone


def _rank_of(run):
    """The RankOf of one rank's run of a multi-rank job, else None."""
    rank, world = run.meta.get("rank"), run.meta.get("world_size")
    if not (type(rank) is int and type(world) is int and world > 1):
        return None
    parent = run.path.parent
    return RankOf(rank, world, str(parent) if is_multi_rank(parent) else None)


def _training_events(run, records):
    """The run's GC events inside the epochs of `records`, the epochs whose time the findings'
    shares divide: the set-up's collections before them (a script building its data) are no
    uptime trend of the training, and collections between epochs (a script's own gc.collect()
    after each one, --gc-policy manual:N's when there are no steps) are outside that time. Runs
    whose records lack start_s: every event from the first epoch on."""
    events = run.gc_events()
    starts = [r.get("start_s") for r in records]
    if not len(events):
        return events
    if None in starts:
        first = run.epochs[0].get("start_s")
        return events[events["start_s"] >= first] if first is not None else events
    order = np.argsort(starts)
    walls = [r["wall_s"] for r in records]
    return events[stats.within(np.array(starts)[order], np.array(walls)[order], events["start_s"])[1]]


# how far epoch time may move with no sustained trend and still be called steady: the fitted change's
# 95% interval and the late / early medians within +-25%. Medians further apart with no trend are
# a run too noisy to tell (one alternating 18 and 150 ms epochs: medians 20 and 168 ms, -38% to +509%)
STEADY_BAND = 0.25


def _within(ratio):
    return 1 / (1 + STEADY_BAND) <= ratio <= 1 + STEADY_BAND


def _traced_slowdown(wall, timed):
    """The median epoch time left out of the trend (traced) over the median of the others', or None."""
    traced = np.delete(wall, timed)
    others = float(np.median(wall[timed]))
    return float(np.median(traced)) / others if len(traced) and others > 0 else None


STEP_TREND_STEPS = 200   # steps in the analysed epochs that tell a trend where the epochs are too few
STEP_CHANGE = 0.15       # the least relative change of the median step that counts as a trend
STEP_POINTS = 2000       # at most this many points, each the median of a run of consecutive steps


def _step_trend(steps, epochs):
    """StepTrend over the steps of `epochs` (their indices), None with fewer than STEP_TREND_STEPS;
    read in chunks, steps' times as float32 (a 10-million-step epoch: 40 MB)."""
    walls, gcs = [], []
    for a in range(0, len(steps), spk.CHUNK):
        block = steps[a:a + spk.CHUNK]
        mine = np.isin(np.asarray(block["epoch"]), epochs)
        walls.append(np.asarray(block["wall_s"], np.float32)[mine])
        gcs.append((np.asarray(block["gc0_s"], np.float32) + np.asarray(block["gc1_s"], np.float32)
                    + np.asarray(block["gc2_s"], np.float32))[mine])
    wall = np.concatenate(walls) if walls else np.empty(0, np.float32)
    if len(wall) < STEP_TREND_STEPS:
        return None
    size = -(-len(wall) // STEP_POINTS)
    whole = len(wall) // size * size   # a last run shorter than the others is left out
    groups = wall[:whole].reshape(-1, size)
    x, medians = np.arange(len(groups)) * size, np.median(groups, axis=1).astype(float)
    change = stats.change(x, medians, early_floor=True)
    # steps are noisier than epochs: a trend must clear STEP_CHANGE and its interval must exclude none
    # (flat single-epoch runs with lognormal noise read a sustained slowdown in 16 of 300 seeds without)
    strict = abs(change.relative) >= STEP_CHANGE and (change.relative_low > 0 or change.relative_high < 0)
    change = replace(change, sustained=change.sustained and strict)
    # means of the early and the late window's steps, spikes included (their medians leave GC's out)
    w, gc = stats.window(len(groups)), np.concatenate(gcs)[:whole].reshape(-1, size)
    mean_wall = (float(groups[:w].mean(dtype=float)), float(groups[-w:].mean(dtype=float)))
    mean_gc = (float(gc[:w].mean(dtype=float)), float(gc[-w:].mean(dtype=float)))
    delta = mean_wall[1] - mean_wall[0]
    # the time above the early mean step: what the run would have saved at that pace. A flat run's noise
    # cancels in the sum (every step above the early median made 0.70 s of its 2.28 s, a review), and the
    # sum is the run's own (a fitted change times the early mean made 331% of a run whose steps started small)
    excess = max(float(wall[:whole].sum(dtype=float)) - whole * mean_wall[0], 0.0)
    return StepTrend(change, int(len(wall)), excess,
                     float(np.clip((mean_gc[1] - mean_gc[0]) / delta, 0.0, 1.0)) if delta > 0 else 0.0)


def _float(value):
    return None if value is None else float(value)


def _workers(w):
    spawned = w.get("spawned", 0)
    return Workers(int(w["count"] + spawned), int(w["uss_bytes"] + w.get("spawned_uss_bytes", 0)), int(spawned))


def memory_of(loaded):
    """(Allocation, the allocation-growth Finding or None): what a loaded run's memory did (load.load)."""
    run, records = loaded.run, loaded.records
    # deep capture's snapshots wait within its budget after a costly one (seconds over a large heap),
    # so a short run can have them all in its warm-up: their sites then, rather than none
    heaps = [r.get("heap") or {} for r in records]
    sited = records if any(h.get("snapshot") or h.get("top_growth") for h in heaps) else \
        run.epochs[loaded.skipped - loaded.warmup:]
    sites = fnd.top_sites(sited)
    trend = fnd.rss_trend(run.rss_samples(), records, stopped_start(run))
    found = (fnd.memory_growth(records, sites, sited, (run.meta.get("options") or {}).get("tracemalloc"))
             or fnd.rss_growth(trend))
    rates, idx = fnd.memory_rates(records), [r["epoch"] for r in records]
    rss = [b for b in fnd.memory_series(records)["rss"] if b is not None]   # deep capture's epochs left out
    return Allocation(rss_growth_bytes_per_epoch=rates["rss"], traced_growth_bytes_per_epoch=rates["traced"],
                      malloc_growth_bytes_per_epoch=rates["malloc"], rss_start_bytes=_float(rss[0] if rss else None),
                      rss_end_bytes=_float(rss[-1] if rss else None), top_sites=sites, epochs=len(records),
                      span_epochs=float(idx[-1] - idx[0]), rss_limit_bytes=fnd.rss_limit(records),
                      rss_rise_bytes=fnd.level_rise(rss), rss_trend=trend), found


def analyze(run_dir):
    """Read a run directory and diagnose it (RunDirError if it cannot be read or has no epochs);
    a Run read already (rundir.read_run) is diagnosed as it is. A directory of rank-N/ run
    directories is diagnosed as one job (analysis/ranks.py)."""
    if not isinstance(run_dir, rundir.Run) and is_multi_rank(run_dir):
        from .ranks import diagnose_ranks   # it diagnoses one rank with this function
        return diagnose_ranks(run_dir)
    loaded = load(run_dir, "analyze")
    run, records = loaded.run, loaded.records
    idx = np.array([r["epoch"] for r in records], float)
    wall = np.array([r["wall_s"] for r in records])
    pause = np.array([sum(r["gc"]["pause_s"]) for r in records])

    # the epoch-time trend leaves out epochs that auto capture traced (tracemalloc slows them
    # 2-10x) when there are others: windows opened late would read as a slowdown; and a last epoch
    # cut short, which would read as a speed-up
    timed = timed_epochs(records)
    cut = cut_short(records)
    trended, same_steps = one_size(records)
    change = stats.change(idx[trended], wall[trended])
    slowdown, faster = change.sustained and change.relative > 0, change.sustained and change.relative < 0
    early_s, late_s = change.early, change.late
    ratio = late_s / early_s if early_s > 0 else 1.0
    trendless = not (slowdown or faster)
    share = np.divide(pause, wall, out=np.zeros_like(wall), where=wall > 0)
    share_early, share_late = stats.early_late(share[timed])   # tracemalloc's epochs' GC is no run's
    explained = fnd.gc_explained([records[i] for i in trended], change)

    # spikes leave the traced epochs out too (their steps are tracemalloc's slowdown, not the run's)
    kept = [records[i] for i in timed]
    steps = run.steps()
    if len(steps):   # fractions of the epochs' time: steps leave out the time between them
        totals = (float(wall[timed].sum()), spk.epoch_arrays(kept)[1].sum(axis=0))
        traced = np.array(sorted({r["epoch"] for r in records} - {r["epoch"] for r in kept}), np.int64)
        spikes = spk.of_steps(steps, records[0]["epoch"], totals, traced)
    else:
        spikes = spk.of_epochs(kept)
    allocation, memory = memory_of(loaded)
    sites = allocation.top_sites
    site = fnd.python_site(sites)
    objs = fnd.objects(records, run.epochs)
    index = op_index(records)
    series = op_series(index, len(records), followed(op_time(index, len(records))))
    # each op's growth over the epochs the epoch-time trend is fitted on: one size of epoch, none traced or cut short
    ops = fnd.op_growth([records[i] for i in trended], {op: (s[trended], c[trended]) for op, (s, c) in series.items()})

    policy, forced = run.gc_policy, fnd.forced(records)
    growth = fnd.pause_growth(_training_events(run, kept), kept, spikes, objs, site, forced, policy)
    # full collections over memory that grows to the end walk a growing heap, as growing pauses show: with
    # CPython's full collections ever further apart (a quarter more objects each time), too few to fit
    growing = ("gc-growing-pauses" if growth else "allocation-growth"
               if memory and not memory.evidence.levels_off and spikes.generation == 2 else None)
    step_trend = (_step_trend(steps, [r["epoch"] for r in kept])
                  if len(steps) and not change.fitted and len(trended) < stats.MIN_POINTS else None)
    computing = (fnd.compute_growth(records, change, explained, ops, trended) if step_trend is None else
                 fnd.step_compute_growth(step_trend, float(wall[timed].sum()), ops))
    found = [fnd.gc_spikes(spikes, objs, site, policy, forced, growing=growing), growth,
             memory, computing, fnd.worker_memory(records), fnd.input_wait(kept)]
    found.append(fnd.gc_steady(records, spikes, growth.time_fraction * spikes.wall_s if growth else 0.0, objs, site,
                               policy, forced))
    between = fnd.between_epochs(gapped(loaded), objs, policy)
    found.append(fnd.gc_between_epochs(between))
    ranked = fnd.rank([f for f in found if f is not None])

    workers = [r["workers"] for r in records if r.get("workers")]
    return Diagnosis(
        run_dir=str(run.path), epochs=len(run.epochs), status=run.status, complete=run.complete,
        problems=list(run.problems), cautions=list(run.cautions),
        epoch_time=EpochTime(early_s, late_s, ratio, change, slowdown, faster, loaded.skipped,
                             steady=change.fitted and trendless and _within(ratio)
                             and -STEADY_BAND <= change.relative_low and change.relative_high <= STEADY_BAND,
                             swings=trendless and not _within(ratio), traced_epochs=len(records) - len(timed),
                             traced_slowdown=_traced_slowdown(wall, timed), step_trend=step_trend,
                             between_share=(between.between_s / (between.between_s + between.epochs_s)
                                            if between and between.between_s + between.epochs_s > 0 else None),
                             setup_epochs=loaded.skipped - loaded.warmup, same_steps=same_steps,
                             cut_short=None if cut is None else (
                                 int(records[cut[0]]["epoch"]), int(records[cut[0]].get("steps") or 0), cut[1])),
        primary_cause=ranked[0].cause if ranked else "none",
        gc=GcSummary(share_early=share_early, share_late=share_late, explained_fraction=explained,
                     share_total=float(pause[timed].sum() / wall[timed].sum()) if wall[timed].sum() > 0 else 0.0,
                     generation=int(np.argmax(spikes.gc_by_generation_s)),
                     full_collections_per_epoch=float(np.mean([r["gc"]["collections"][2] for r in records])),
                     tracked=objs.tracked if objs else None, forced_share=forced.share if forced else None,
                     share_between=between.share if between else None),
        allocation=allocation,
        steps=(StepSummary(spikes.total, spikes.median_s, spikes.p99_s, spikes.time_fraction,
                           spikes.gc_explained_fraction) if len(steps) else None),
        findings=ranked, ops=ops,
        workers=_workers(workers[-1]) if workers else None,
        spikes=spikes, meta=run.user_meta, unfinished=run.ends_unfinished, rank_of=_rank_of(run))
