"""analyze_ranks(multi_rank_dir) -> RankAnalysis: which rank holds the others back, how often, and why.

In a data-parallel job every rank waits at each collective for the slowest one, so one rank's
stall is everyone's lost time, and the ranks that wait show nothing wrong in their own process:
only longer steps. Steps (or epochs, when a rank recorded no steps) are aligned by index across
ranks, and what a rank did on its own is told apart from what it waited for by where the
collective lies, which the clocks show (meta.json's clock_origin_unix aligns ranks and hosts):

    in-step         steps END together (the all-reduce is inside the step: PyTorch DDP's backward,
                    the engine's optimizer step). A rank that waited has a longer step; the rank it
                    waited for began its step late (the time before it, data loading, was longer)
                    or paused in its own GC inside it. Taken unless the steps clearly begin together.
    between-steps   steps BEGIN together (the step ends before the collective). The straggler's
                    own step is longer; the others wait between steps.
    none            neither: the ranks' steps wander apart by more than SYNC_STEPS steps (a per-step
                    collective keeps them within a fraction of one), so no rank waits for another
                    and none holds the others back (ranks that never call a collective).

Per aligned step and rank, the rank's stall is its own time above the median rank's:

    in-step:        stall = max(min(gap - gap[m], begin - begin[m]),   gap: time since its previous step
                                gc - gc[m])                            ended; begin: when the step began,
    between-steps:  stall = max(wall - wall[m], gc - gc[m])            on the ranks' aligned clocks
                                                                       gc: its GC pause in the step, plus
                                                                       any GC event just before it
A longer gap alone is not a late start: behind a step that ended late (work after the collective,
an epoch's end with its evaluation and the profiler's own record) both ranks may begin together.
The median rank m is a real rank (the lower median: with two ranks, the faster one), so with two
ranks a stall is the whole difference between them. A step is straggled when its largest stall
exceeds STALL_FLOOR of the job's median step; the job lost that stall (every other rank waited
for it). The straggler is the rank that caused most of the lost time; its own GC pauses (by
generation) explain the part of its stalls they cover. The warm-up epochs' steps are left out.

Streaming: steps are read in blocks of at most BLOCK_VALUES values across all ranks, straight from
each rank's steps.bin, so memory is bounded by the block and by per-step results, never by
ranks x steps. Nothing here writes sentences: renderers do (profiler.report).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import rundir
from ..rundir.format import BACKWARD_OP
from ..rundir.reader import step_count
from ..rundir.ranks import MAX_UNIX, rank_dirs
from . import diagnose, findings, stats
from .load import left_out, stopped_start

BLOCK_VALUES = 1 << 18   # ranks x steps per block
STALL_FLOOR = 0.10       # a stall counts when it exceeds this share of the job's median step
STRAGGLER_SHARE = 0.5    # a straggler causes at least this share of the lost time...
STRAGGLER_MIN = 0.02     # ...and its stalls cost at least this share of the job's time...
STRAGGLER_LEAD = 2.0     # ...at least this many times the next rank's (of two ranks, one always has half)
# stalls a finding needs, a straggler's own or the ranks' in turn, unless the stalling ranks' own full
# collections explain them: one slow step (a worker's first batch of an epoch, a page fault, a long
# young collection) is no rank holding the others back, while two full collections that cost a tenth
# of the job are
MIN_STALLS = 3
FEW_SHARE = 0.9   # stalls whose largest MIN_STALLS - 1 hold this share of their time are that many events
# aligned units after the warm-up below which no rank is called a straggler, as epoch time tells no
# trend from fewer: a rank that finished one epoch of a long job left one step to judge, and its stall
# there read "in 100.0% of the steps"
MIN_ALIGNED = stats.MIN_POINTS
FINISHED = ("completed", "halted")
PROBE_STEPS = 2000       # steps read to find where the collective lies
# how far apart, in median steps, the ranks' step beginnings and ends may wander (the median absolute
# deviation of the ranks' offsets from rank 0, all ranks' steps together: a straggler's recurring
# stalls, on fewer than half the steps, leave it alone) and still be waiting for each other: jobs with
# a collective every step measured 0.012-0.30 here, ranks that never called one 0.92-12.7. Below
# SYNC_MIN_STEPS probe steps a wander that keeps growing cannot be told from one that does not yet
SYNC_STEPS = 0.5
SYNC_MIN_STEPS = 30
# ranks whose steps drift apart meet once an epoch when their epochs begin within this share of the
# median epoch of each other (the same deviation over the epochs): after a barrier they start
# together, within milliseconds; ranks that never meet drift by whole steps an epoch
EPOCH_SYNC = 0.05
SYNC_MIN_EPOCHS = 3


@dataclass
class RankSummary:
    rank: int
    local_rank: int | None
    host: str | None
    status: str
    epochs: int                  # finished epochs
    steps: int                   # recorded steps (0 when the rank records epochs only)
    last_step: int | None        # index of the last finished step (epoch, when no steps)
    median_s: float              # median step (or epoch) time
    gc_share: float              # GC pause (in steps and between them) / time from first step to last
    gc_pause_s: list             # GC pause by generation over the whole run
    rss_growth_bytes_per_epoch: float | None   # None: too few epochs after its warm-up to fit (stats.slope: 3)
    error: str | None = None     # what its run recorded ending with
    stopped_unix: float | None = None   # when it ended: its final status's time, else its last step's (or epoch's) end
    straggled: int = 0           # aligned steps this rank held the others back
    stall_s: float = 0.0         # the time those stalls cost the job
    complete: bool = True        # its run as read is whole (Run.complete): a final status, no line lost or torn
    cautions: list = field(default_factory=list)   # what its records leave out (Run.cautions)
    forced: object = None        # findings.Forced over its epochs after the warm-up (None: not recorded)
    silent_s: float | None = None   # from its last recorded step's (epoch's) end to its final status (a hang,
                                    # or work outside its steps); None when not known
    data_wait_s: float | None = None   # its wait for DataLoader batches per step after the warm-up (None: not timed)
    backward_s: float | None = None    # its Tensor.backward() time per step after the warm-up (None: not timed)
    own_s: float | None = None   # the rest of its steps' time per step: less backward, data waits and GC pauses
    gc_step_s: float | None = None   # its GC pause inside its steps, per step (with backward_s)
    memory_trend: object = None  # findings.MemoryTrend of its anonymous memory through fewer epochs than
                                 # findings.MEMORY_MIN_EPOCHS after its warm-up (None: more, or too few readings)


@dataclass
class Straggler:
    """The rank that caused most of the job's lost time (ARCHITECTURE.md: rank, time_fraction,
    gc_explained_fraction), with how often, how long, and what else it shows."""
    rank: int
    unit: str                        # "step" or "epoch"
    time_fraction: float             # its stalls, as a share of the job's time
    gc_explained_fraction: float     # share of its stalls its own GC pauses (above the median rank's) cover
    gc_explained_by_generation: list
    steps: int                       # aligned steps it stalled
    step_fraction: float
    stall_s: float                   # the job's time lost to it
    median_stall_s: float
    stall_growth: float              # mean stall, second half of its stalls / first half
    mean_interval: float             # aligned steps between its stalls, on average
    share_of_lost: float             # of all the job's lost time
    rss_growth_bytes_per_epoch: float
    others_rss_growth_bytes_per_epoch: float   # the median of the other ranks'
    forced: object = None            # findings.Forced: its own gc.collect() calls (None: not recorded)


@dataclass
class InputStraggler:
    """A rank whose wait for DataLoader batches holds a data-parallel job back: every rank's step waits
    for its gradients at the all-reduce, so the time shows in every rank's step, as no stall."""
    rank: int
    wait_s: float            # its wait for batches per step
    others_wait_s: float     # the median of the other ranks'
    step_s: float            # the job's mean step
    time_fraction: float     # (wait_s - others_wait_s) / step_s: the share of the job's time it costs


@dataclass
class ComputeStraggler:
    """A rank slower at its own work in the step (its forward, a larger shard) that holds a
    data-parallel job back: the others wait for its gradients inside their Tensor.backward(), where
    the all-reduce ends, so every rank's step is as long and none shows a stall."""
    rank: int
    own_s: float             # its time per step outside backward, data waits and GC pauses
    others_own_s: float      # the median of the other ranks'
    backward_s: float        # its Tensor.backward() per step
    others_backward_s: float   # the other ranks' median: theirs holds the wait for it
    step_s: float            # the job's mean step
    time_fraction: float     # (own_s - others_own_s) / step_s: the share of the job's time it costs


@dataclass
class RankStalls:
    """Lost time spread over the ranks, when no rank stands out: evidence of the rank-stalls finding."""
    ranks: int
    ranks_stalling: int
    unit: str
    steps: int                       # aligned steps with a stall above the floor
    lost_s: float
    lost_fraction: float
    gc_explained_by_generation: list
    forced: dict = field(default_factory=dict)   # rank -> the line of its own gc.collect() calls, where they are
                                                 # most of each stalling rank's GC pause (else empty)


@dataclass
class RankAnalysis:
    run_dir: str
    ranks: int
    unit: str                    # "step" or "epoch": what was aligned across ranks
    collective: str              # "in-step", "between-steps", "between-epochs" (steps drift apart, epochs begin
                                 # together: epochs compared), "none" (the ranks drift apart), "one-rank", or
                                 # "unknown" (epochs, or no clocks)
    drift_steps: float | None    # how far the ranks' steps drift apart, in median steps (None: not measured)
    aligned: int                 # indices every rank finished
    warmup: int                  # of those, left out at the start
    job_time_s: float            # the aligned steps' time: per step the longest, with the time before it
    median_s: float              # the job's median step (the longest, with the time before it)
    lost_s: float                # time the job lost waiting for stalled ranks
    lost_fraction: float
    straggled_steps: int         # aligned steps with a stall above the floor
    stragglers: Straggler | None
    lost_gc_by_generation: list  # share of all the lost time the stalling ranks' own GC covers, by generation
    ranks_stalling: int          # ranks that held the others back at least once
    per_rank: list = field(default_factory=list)   # RankSummary per rank, by rank
    unfinished: list = field(default_factory=list)  # {"rank", "status", "last_step", "steps", "epochs", "error",
                                                    #  "first", "killed_before"}, in _stop_order
    diagnosed: int | None = None  # the rank whose own run a Diagnosis's other fields describe
    events: bool = False         # the lost time is in fewer than MIN_STALLS stalls that matter (_few)
    input_straggler: InputStraggler | None = None   # a rank slow to load its batches (_input_straggler)
    compute_straggler: ComputeStraggler | None = None   # a rank slow at its own work in the step (_compute_straggler)


@dataclass
class RankHeatmap:
    """Stall by rank and step bin (max within the bin), for the rank x step figure."""
    unit: str
    ranks: list                  # the rank of each row (a rank that finished nothing has none)
    edges: np.ndarray            # bin edges in aligned indices, len(bins) + 1
    stall_s: np.ndarray          # (ranks, bins) largest stall in the bin
    gc2: np.ndarray              # (ranks, bins) True where a generation-2 pause fell in the bin


@dataclass
class _Block:
    """Aligned indices [start, stop) of every rank: arrays (ranks, k), gc (3, ranks, k)."""
    start: int
    stop: int
    begin_s: np.ndarray          # step start, seconds since the Unix epoch (nan without a clock)
    gap_s: np.ndarray            # time between the previous step's end and this step's start
    wall_s: np.ndarray
    gc_s: np.ndarray


class _Source:
    """One rank's aligned series, read block by block: steps.bin when every rank has steps, else
    epochs. A GC event between two steps (gc_events.bin) counts as the next step's own GC."""

    def __init__(self, path, steps, unit, origin=None, gap_events=None):
        self.path, self.steps, self.unit = path, steps, unit   # steps: the rank's checked steps.bin (memory-mapped)
        self.origin = np.nan if origin is None else origin
        self.gap_events = gap_events   # (step index, generation, duration) arrays, or None

    def read(self, start, stop):
        """(begin, gap, wall, gc[3]) for indices [start, stop) as float64 arrays."""
        if self.unit == "epoch":
            epochs = rundir.read_run(self.path).epochs[start:stop]
            wall = np.array([e["wall_s"] for e in epochs], float)
            gc = np.array([e["gc"]["pause_s"] for e in epochs], float).reshape(-1, 3).T
            return np.full(len(wall), np.nan), np.zeros(len(wall)), wall, gc
        first = max(start - 1, 0)      # the previous step's end gives the first gap
        rec = self.steps[first:stop]
        begin = rec["start_s"].astype(float)
        end = begin + rec["wall_s"]
        gap = np.concatenate([[0.0], begin[1:] - end[:-1]])
        gc = np.stack([rec["gc0_s"], rec["gc1_s"], rec["gc2_s"]]).astype(float)
        if self.gap_events is not None:
            index, generation, duration = self.gap_events
            mine = (index >= first) & (index < stop)
            np.add.at(gc, (generation[mine], index[mine] - first), duration[mine])
        cut = start - first
        return begin[cut:] + self.origin, gap[cut:], rec["wall_s"][cut:].astype(float), gc[:, cut:]


def _gap_events(run, steps):
    """The GC events that fell between two steps, as (index of the next step, generation, duration);
    None when there are none."""
    events = run.gc_events()
    if not len(events) or not len(steps):
        return None
    # the last step that started before each event; inside it, already in that step's own GC fields
    before, inside = stats.within(steps["start_s"], steps["wall_s"], events["start_s"])
    gap = ~inside & (before >= 0) & (before + 1 < len(steps))   # not set-up, before the first step
    return (before[gap] + 1, events["generation"][gap].astype(int), events["duration_s"][gap].astype(float))


def _rank(rank_dir, unit):
    """The rank's summary over its whole run, its aligned series, and the steps of its warm-up epochs."""
    run = rundir.read_run(rank_dir.path)
    steps = run.steps()
    epochs = run.epochs
    warm_epochs = sum(left_out(epochs))   # the set-up's epochs and the warm-up, as load() leaves them out
    if unit == "step":
        wall = np.asarray(steps["wall_s"], float)
        pause = [float(np.sum(steps[f"gc{g}_s"], dtype=float)) for g in range(3)]
        first_epoch = epochs[warm_epochs]["epoch"] if warm_epochs < len(epochs) else np.inf
        warm = int(np.searchsorted(steps["epoch"], first_epoch)) if warm_epochs else 0
    else:
        wall = np.array([e["wall_s"] for e in epochs], float)
        pause = [float(sum(e["gc"]["pause_s"][g] for e in epochs)) for g in range(3)]
        warm = warm_epochs
    gap_events = _gap_events(run, steps) if unit == "step" else None
    if gap_events is not None:    # collections between steps are the rank's GC time too
        pause = [p + float(gap_events[2][gap_events[1] == g].sum()) for g, p in enumerate(pause)]
    if unit == "step" and len(wall):
        first, last = steps[0], steps[-1]
        total = float(last["start_s"] + last["wall_s"] - first["start_s"])   # the time between steps too
    else:
        total = float(wall.sum())
    used = epochs[warm_epochs:]
    on_disk = run.steps(every=True)   # the steps of the epoch it stopped in too: recorded, if not compared
    waits, stepped = findings.data_waits(used), sum(e.get("steps") or 0 for e in used)
    backwards, analysed = findings.op_total(used, BACKWARD_OP), len(wall) - warm
    backward = own = gc_step = None
    if unit == "step" and backwards and analysed > 0:   # per analysed step: the steps' own time, not the epochs'
        in_steps = sum(float(np.sum(steps[f"gc{g}_s"][warm:], dtype=float)) for g in range(3))
        backward, gc_step = backwards[0] / analysed, in_steps / analysed
        own = (float(wall[warm:].sum()) - in_steps - backwards[0] - (waits[0] if waits else 0.0)) / analysed
    rss_rate = stats.slope([e["epoch"] for e in used], [e["rss_bytes"] for e in used]) if len(used) >= 3 else None
    trend = findings.rss_trend(run.rss_samples(), used, stopped_start(run))
    summary = RankSummary(
        rank=rank_dir.rank, local_rank=rank_dir.local_rank, host=rank_dir.host, status=run.status,
        epochs=len(epochs) - run.ends_unfinished,   # finished: not the one it stopped in
        steps=len(steps), last_step=(len(wall) - 1) if len(wall) else None,
        median_s=float(np.median(wall)) if len(wall) else 0.0,
        gc_share=sum(pause) / total if total > 0 else 0.0, gc_pause_s=pause, rss_growth_bytes_per_epoch=rss_rate,
        error=run.meta.get("error"),   # a string or None (the reader checks it)
        stopped_unix=_stopped(run, on_disk, rank_dir.clock_origin_unix), complete=run.complete,
        silent_s=_silent(run, on_disk, rank_dir.clock_origin_unix),
        cautions=list(run.cautions), forced=findings.forced(used),
        data_wait_s=waits[0] / stepped if waits and stepped else None, memory_trend=trend,
        backward_s=backward, own_s=own, gc_step_s=gc_step)
    source = _Source(rank_dir.path, steps, unit, rank_dir.clock_origin_unix, gap_events)
    return summary, source, warm


def _stopped(run, steps, origin):
    """When the rank's run ended (time.time()): its final status's time, or, when it recorded none (a
    rank killed), the end of its last step (`steps`: every one on disk) or epoch; None without a
    clock origin."""
    finished = run.meta.get("finished_unix")
    if type(finished) in (int, float) and 0 <= finished <= MAX_UNIX:
        return float(finished)
    if origin is None:
        return None
    if len(steps):
        return origin + float(steps[-1]["start_s"] + steps[-1]["wall_s"])
    ends = [e["start_s"] + e["wall_s"] for e in run.epochs if e.get("start_s") is not None]
    return origin + ends[-1] if ends else origin


def _silent(run, steps, origin):
    """Seconds from the end of the rank's last recorded step (`steps`: every one on disk, an unfinished
    epoch's too) or epoch to its final status, or None (no final status time, no clock origin,
    nothing recorded)."""
    finished = run.meta.get("finished_unix")
    if origin is None or type(finished) not in (int, float) or not 0 <= finished <= MAX_UNIX:
        return None
    if len(steps):
        return max(float(finished) - origin - float(steps[-1]["start_s"] + steps[-1]["wall_s"]), 0.0)
    ends = [e["start_s"] + e["wall_s"] for e in run.epochs if e.get("start_s") is not None]
    return max(float(finished) - origin - ends[-1], 0.0) if ends else None


def _input_straggler(per_rank, step_s):
    """The rank whose wait for DataLoader batches per step leads the others' STRAGGLER_LEAD times and
    exceeds their median by findings.MEANINGFUL of the job's mean step `step_s` (waits that come in
    bursts, a slow file every Nth batch, are a mean too), or None."""
    waits = {s.rank: s.data_wait_s for s in per_rank if s.data_wait_s is not None}
    if len(waits) < 2 or step_s <= 0:
        return None
    rank = max(waits, key=waits.get)
    others = float(np.median([w for r, w in waits.items() if r != rank]))
    share = (waits[rank] - others) / step_s
    if share < findings.MEANINGFUL or not _leads(list(waits.values())):
        return None
    return InputStraggler(rank, waits[rank], others, step_s, float(share))


def _compute_straggler(per_rank, step_s):
    """The rank whose own work per step (RankSummary.own_s) exceeds the other ranks' median by
    findings.MEANINGFUL of the job's mean step `step_s` (work that comes in bursts, every Nth step,
    is a mean too), where the others wait for it inside their Tensor.backward() (their median
    backward longer than its own, less what its longer data waits and GC pauses would make them
    wait, by at least half that excess: the all-reduce ends there, as under
    DistributedDataParallel), or None. A rank whose step is longer with no one waiting for it inside
    backward is no one's straggler here (ranks that never all-reduce, or do it between steps, where
    the stalls tell); nor is one the others wait for only while it loads or collects (the input and
    GC stragglers)."""
    ranks = {s.rank: s for s in per_rank if s.own_s is not None}
    if len(ranks) < 2 or step_s <= 0:
        return None
    slow = max(ranks.values(), key=lambda s: s.own_s)
    others = [s for s in ranks.values() if s is not slow]

    def median(key):
        return float(np.median([getattr(s, key) or 0.0 for s in others]))
    own, backward = median("own_s"), median("backward_s")
    excess = slow.own_s - own
    waited = (backward - slow.backward_s - max(0.0, (slow.data_wait_s or 0.0) - median("data_wait_s"))
              - max(0.0, slow.gc_step_s - median("gc_step_s")))
    if excess < findings.MEANINGFUL * step_s or waited < excess / 2:
        return None
    return ComputeStraggler(slow.rank, slow.own_s, own, slow.backward_s, backward, step_s, float(excess / step_s))


def _leads(stalls):
    """Whether the largest of the ranks' `stalls` is STRAGGLER_LEAD times the next (one rank: it leads)."""
    ordered = np.sort(np.asarray(stalls, float))
    return len(ordered) < 2 or ordered[-1] >= STRAGGLER_LEAD * ordered[-2]


def _few(stalls):
    """Whether `stalls` are fewer than MIN_STALLS that matter: their largest MIN_STALLS - 1 hold FEW_SHARE
    of their time (two 150-ms events and two 2-ms stalls just above the floor are two events)."""
    ordered = np.sort(np.asarray(stalls, float))[::-1]
    return len(ordered) < MIN_STALLS or ordered[:MIN_STALLS - 1].sum() >= FEW_SHARE * ordered.sum()


def _blocks(sources, first, stop_at):
    """_Block after _Block over the aligned indices [first, stop_at)."""
    k = max(1, BLOCK_VALUES // len(sources))
    for start in range(first, stop_at, k):
        stop = min(start + k, stop_at)
        arrays = [np.empty((len(sources), stop - start)) for _ in range(3)]
        gc = np.empty((3, len(sources), stop - start))
        for r, source in enumerate(sources):
            arrays[0][r], arrays[1][r], arrays[2][r], gc[:, r] = source.read(start, stop)
        yield _Block(start, stop, *arrays, gc)


def _collective(sources, first, stop_at):
    """(where the collective lies, drift_steps), from the first steps: do the ranks' steps end or
    begin together, or drift apart? Measured as how much each rank's step ends (or beginnings)
    move against rank 0's, so a constant clock offset between ranks or hosts does not count.
    Inside the step unless the beginnings are clearly steadier (the ends of a step are not exact
    on a loaded machine); none when both drift more than SYNC_STEPS median steps over at least
    SYNC_MIN_STEPS steps."""
    if len(sources) < 2:
        return "one-rank", None
    if sources[0].unit != "step" or any(np.isnan(s.origin) for s in sources):
        return "unknown", None
    stop = min(stop_at, first + min(PROBE_STEPS, max(1, BLOCK_VALUES // len(sources))))
    block = next(_blocks(sources, first, stop))
    step = float(np.median(block.gap_s + block.wall_s))

    def wander(times):   # the median absolute deviation of (rank - rank 0), all ranks' steps together
        d = times[1:] - times[0]
        return float(np.median(np.abs(d - np.median(d, axis=1, keepdims=True))))
    begins, ends = wander(block.begin_s), wander(block.begin_s + block.wall_s)
    drift = min(begins, ends) / max(step, 1e-12)
    if drift > SYNC_STEPS and block.stop - block.start >= SYNC_MIN_STEPS:
        return "none", drift
    return "between-steps" if begins < 0.5 * ends else "in-step", drift


def _median_rank(values, axis):
    """The lower median along `axis`: the value of an actual rank."""
    middle = (values.shape[axis] - 1) // 2
    return np.take(np.partition(values, middle, axis=axis), [middle], axis=axis)


def _own(block, collective):
    """Each rank's own time (ranks, k) and GC pause by generation (3, ranks, k) above the median rank's;
    zero when the ranks do not wait for each other (collective "none"): no rank's time held another."""
    own = block.gap_s if collective == "in-step" else block.wall_s
    own = own - _median_rank(own, 0)
    if collective == "in-step" and not np.isnan(block.begin_s).any():
        # a longer gap holds the others back only if the step also began later: a gap behind a step
        # that ended late (work after the collective, the end of an epoch) is not a late start
        own = np.minimum(own, block.begin_s - _median_rank(block.begin_s, 0))
    gc_x = np.clip(block.gc_s - _median_rank(block.gc_s, 1), 0.0, None)
    stall = np.maximum(own, gc_x.sum(axis=0))
    if collective == "none":
        return np.zeros_like(stall), np.zeros_like(gc_x)
    return stall, gc_x


def _stalls(block, collective):
    """Per aligned index: the rank with the largest stall, the stall, and its GC above the median rank's."""
    stall, gc_x = _own(block, collective)
    cols = np.arange(stall.shape[1])
    top = stall.argmax(axis=0)
    return top, np.maximum(stall[top, cols], 0.0), gc_x[:, top, cols]


def _count(rank_dir, unit):
    if unit == "step":
        return step_count(rank_dir.path)
    return len(rundir.read_run(rank_dir.path).epochs)


def _open(run_dir):
    """The checked rank directories and the unit to align (steps, when every rank that finished
    anything recorded steps)."""
    dirs = rank_dirs(run_dir)
    steps = [_count(d, "step") for d in dirs]
    no_steps = [_count(d, "epoch") for d, s in zip(dirs, steps) if not s]   # epochs of the ranks without steps
    unit = "step" if any(steps) and not any(no_steps) else "epoch"
    if not any(steps) and not any(no_steps):
        raise rundir.RunDirError(f"no rank in {run_dir} finished an epoch: nothing to analyze")
    return dirs, unit


def _taking_part(run_dir, per_rank, unit):
    """Whether each rank takes part (a rank that died before finishing a step, or epoch, is reported,
    not aligned) and the units every one that does finished. Counted as read (RankSummary), not from
    steps.bin's size: that holds the steps of an epoch a killed rank never finished (no line in
    epochs.jsonl), which the reader leaves out, as it leaves out a torn last line's epoch."""
    counts = [s.steps if unit == "step" else s.epochs for s in per_rank]
    if not any(counts):
        raise rundir.RunDirError(f"no rank in {run_dir} finished an epoch: nothing to analyze")
    return [c > 0 for c in counts], min(c for c in counts if c)


@dataclass
class _Layout:
    """What is aligned across the ranks and how."""
    dirs: list            # every rank's directory
    unit: str             # "step" or "epoch"
    live: list            # per rank: whether it takes part (it finished one unit)
    aligned: int          # units every live rank finished
    per_rank: list        # RankSummary per rank
    sources: list         # the live ranks' _Source
    first: int            # the first unit after every live rank's warm-up
    collective: str
    drift: float | None


def _layout(run_dir):
    """The _Layout of a job. Ranks whose steps drift apart (collective "none") but whose epochs
    begin together meet once an epoch (a barrier, a metric's all-reduce, local SGD's averaging):
    their epochs are aligned, collective "between-epochs"."""
    dirs, unit = _open(run_dir)
    read = list(zip(*(_rank(d, unit) for d in dirs)))
    live, aligned = _taking_part(run_dir, read[0], unit)
    collective, drift = _collective(*_live(read, live, aligned), aligned)
    if collective == "none" and _epochs_begin_together(dirs):
        unit, collective = "epoch", "between-epochs"
        read = list(zip(*(_rank(d, unit) for d in dirs)))
        live, aligned = _taking_part(run_dir, read[0], unit)
    sources, first = _live(read, live, aligned)
    return _Layout(dirs, unit, live, aligned, list(read[0]), sources, first, collective, drift)


def _live(read, live, aligned):
    """(the live ranks' sources, the first unit after every live rank's warm-up)."""
    _, sources, warm = read
    first = min(max(w for w, taking_part in zip(warm, live) if taking_part), aligned - 1)
    return [source for source, taking_part in zip(sources, live) if taking_part], first


def _epochs_begin_together(dirs):
    """Whether the ranks' epochs (after the warm-up) begin within EPOCH_SYNC median epochs of each
    other, as one median absolute deviation of their offsets from rank 0's, over at least
    SYNC_MIN_EPOCHS epochs (a constant offset between hosts' clocks does not count)."""
    begins, walls = [], []
    for d in dirs:
        epochs = rundir.read_run(d.path).epochs
        used = epochs[sum(left_out(epochs)):]
        if d.clock_origin_unix is None or any(type(e.get("start_s")) not in (int, float) for e in used):
            return False
        begins.append([d.clock_origin_unix + e["start_s"] for e in used])
        walls += [e["wall_s"] for e in used]
    n = min(map(len, begins))
    if n < SYNC_MIN_EPOCHS:
        return False
    times = np.array([b[:n] for b in begins])
    offsets = times[1:] - times[0]
    wander = float(np.median(np.abs(offsets - np.median(offsets, axis=1, keepdims=True))))
    return wander <= EPOCH_SYNC * float(np.median(walls))


def analyze_ranks(run_dir):
    """Merge the ranks of a multi-rank run directory (RunDirError if they do not form one job)."""
    layout = _layout(run_dir)
    dirs, unit, aligned, per_rank, sources, first, collective = (
        layout.dirs, layout.unit, layout.aligned, layout.per_rank, layout.sources, layout.first, layout.collective)
    ranks_of = np.array([d.rank for d, taking_part in zip(dirs, layout.live) if taking_part])
    n_used = aligned - first
    job = np.empty(n_used)           # the job's time per index: the longest step, with the time before it
    top = np.empty(n_used, int)      # the rank with the largest stall per index
    top_stall = np.empty(n_used)
    top_gc = np.empty((3, n_used))   # that rank's GC pause above the median rank, by generation
    for block in _blocks(sources, first, aligned):
        at = slice(block.start - first, block.stop - first)
        job[at] = (block.gap_s + block.wall_s).max(axis=0)
        position, top_stall[at], top_gc[:, at] = _stalls(block, collective)
        top[at] = ranks_of[position]

    median = float(np.median(job))
    straggled = top_stall > STALL_FLOOR * median
    lost = np.where(straggled, top_stall, 0.0)
    job_time, lost_total = float(job.sum()), float(lost.sum())
    n = len(dirs)
    counts_by_rank = np.bincount(top[straggled], minlength=n)
    stall_by_rank = np.bincount(top[straggled], weights=top_stall[straggled], minlength=n)
    for s, c, t in zip(per_rank, counts_by_rank, stall_by_rank):
        s.straggled, s.stall_s = int(c), float(t)

    def gc_explained(steps):
        """Share of the stalls at `steps` that the stalling rank's own GC covers, by generation (its GC
        above the median rank's, scaled down where it exceeds the stall it explains)."""
        gc = top_gc[:, steps]
        cap = np.minimum(1.0, top_stall[steps] / np.maximum(gc.sum(axis=0), 1e-12))
        return (gc * cap).sum(axis=1) / max(float(top_stall[steps].sum()), 1e-12)

    stragglers = None
    worst = int(stall_by_rank.argmax())
    mine = straggled & (top == worst)
    by_gen = gc_explained(mine)
    if (n_used >= MIN_ALIGNED and lost_total > 0 and stall_by_rank[worst] >= STRAGGLER_SHARE * lost_total
            and stall_by_rank[worst] >= STRAGGLER_MIN * job_time and _leads(stall_by_rank)
            and (not _few(top_stall[mine]) or by_gen[2] >= findings.GC_EXPLAINS)):
        others = [s.rss_growth_bytes_per_epoch for s in per_rank
                  if s.rank != worst and s.rss_growth_bytes_per_epoch is not None]
        half = len(np.flatnonzero(mine)) // 2
        stalls = top_stall[mine]
        stragglers = Straggler(
            rank=worst, unit=unit, time_fraction=float(stall_by_rank[worst] / job_time),
            gc_explained_fraction=min(1.0, float(by_gen.sum())), gc_explained_by_generation=[float(x) for x in by_gen],
            steps=int(counts_by_rank[worst]), step_fraction=float(counts_by_rank[worst] / n_used),
            stall_s=float(stall_by_rank[worst]), median_stall_s=float(np.median(stalls)),
            stall_growth=float(np.mean(stalls[-half:]) / np.mean(stalls[:half])) if half else 1.0,
            mean_interval=float(n_used / counts_by_rank[worst]), share_of_lost=float(stall_by_rank[worst] / lost_total),
            rss_growth_bytes_per_epoch=per_rank[worst].rss_growth_bytes_per_epoch or 0.0,
            others_rss_growth_bytes_per_epoch=float(np.median(others)) if others else 0.0, forced=per_rank[worst].forced)
    stopped = sorted((s for s in per_rank if s.status not in FINISHED), key=_stop_order)
    unfinished = [{"rank": s.rank, "status": s.status, "last_step": s.last_step, "steps": s.steps,
                   "epochs": s.epochs, "error": s.error, "first": False, "killed_before": [],
                   "silent_s": s.silent_s, "median_s": s.median_s} for s in stopped]
    if len(stopped) > 1:
        _first_to_stop(stopped, unfinished[0])
    return RankAnalysis(
        run_dir=str(run_dir), ranks=n, unit=unit, collective=collective, drift_steps=layout.drift, aligned=aligned,
        warmup=first,
        job_time_s=job_time, median_s=median,
        lost_s=lost_total, lost_fraction=lost_total / job_time if job_time > 0 else 0.0,
        straggled_steps=int(straggled.sum()), stragglers=stragglers,
        lost_gc_by_generation=[float(x) for x in gc_explained(straggled)],
        ranks_stalling=int((stall_by_rank > 0).sum()), per_rank=list(per_rank), unfinished=unfinished,
        events=_few(top_stall[straggled]),
        input_straggler=_input_straggler(per_rank, job_time / n_used) if unit == "step" and n_used else None,
        compute_straggler=_compute_straggler(per_rank, job_time / n_used) if unit == "step" and n_used else None)


def rank_heatmap(run_dir, bins=400):
    """Each rank's largest stall (own time or GC above the median rank's) per bin of aligned steps,
    and the bins where it paused in a generation-2 collection."""
    layout = _layout(run_dir)
    aligned, sources, first, collective = layout.aligned, layout.sources, layout.first, layout.collective
    dirs = [d for d, taking_part in zip(layout.dirs, layout.live) if taking_part]
    edges = np.unique(np.linspace(first, aligned, min(bins, max(aligned - first, 1)) + 1).astype(int))
    stall_map = np.zeros((len(dirs), len(edges) - 1))
    gc2_map = np.zeros((len(dirs), len(edges) - 1), bool)
    for block in _blocks(sources, first, aligned):
        stall = np.clip(_own(block, collective)[0], 0.0, None)
        which = np.searchsorted(edges, np.arange(block.start, block.stop), side="right") - 1
        for b in np.unique(which):
            cols = which == b
            stall_map[:, b] = np.maximum(stall_map[:, b], stall[:, cols].max(axis=1))
            gc2_map[:, b] |= (block.gc_s[2][:, cols] > 0).any(axis=1)
    return RankHeatmap(unit=layout.unit, ranks=[d.rank for d in dirs], edges=edges, stall_s=stall_map, gc2=gc2_map)


# the order unfinished ranks are told in: those that recorded an error of their own (failed,
# interrupted), then those killed without recording anything ("running": the time known is only
# their last step's end, which they outlived), then those stopped by SIGTERM (as torchrun stops
# the other ranks when one dies); in each, the first to stop first
_STOP_KINDS = {"running": 1, "terminated": 2}


def _stop_order(s):
    return _STOP_KINDS.get(s.status, 0), s.stopped_unix is None, s.stopped_unix or 0.0, s.rank


def _first_to_stop(stopped, head):
    """Mark `head` (stopped[0]'s entry) as the rank that stopped first when the record says so: it
    recorded its error before any killed rank's last step ended, or it is the one killed and the
    others were all stopped by SIGTERM. When killed ranks' last steps ended before its error, they
    may have died first (a rank killed mid-step records nothing, and the others' next collective
    fails after): head's "killed_before" names them."""
    first, rest = stopped[0], stopped[1:]
    if first.status == "running":
        head["first"] = all(s.status == "terminated" for s in rest)
        return
    if first.status == "terminated" or first.stopped_unix is None:
        return
    head["killed_before"] = [s.rank for s in rest if s.status == "running"
                             and (s.stopped_unix is None or s.stopped_unix <= first.stopped_unix)]
    head["first"] = not head["killed_before"]


def diagnose_ranks(run_dir):
    """The Diagnosis of a multi-rank run: the straggler's own run (else the first rank that finished)
    diagnosed as one run, with the merged numbers (ranks, stragglers, rank_analysis), and the
    straggler (or, when no rank stands out, the stalls spread over the ranks), and a rank slow to load
    its batches, as findings ranked with that rank's own by the share of the job's time each costs."""
    merged = analyze_ranks(run_dir)
    finished = [s.rank for s in merged.per_rank if s.status in FINISHED]
    # else the first rank that finished, else the first to stop that finished an epoch
    live = [u["rank"] for u in merged.unfinished if u["epochs"]] or [u["rank"] for u in merged.unfinished]
    slow = merged.stragglers or merged.input_straggler or merged.compute_straggler
    base = slow.rank if slow else (finished or live)[0]
    d = diagnose.analyze(next(r.path for r in rank_dirs(run_dir) if r.rank == base))
    merged.diagnosed = base
    d.run_dir, d.ranks, d.stragglers, d.rank_analysis = str(run_dir), merged.ranks, merged.stragglers, merged
    d.rank_of = None   # the job, read together
    if merged.stragglers:
        s = merged.stragglers
        cause = "gc" if s.gc_explained_fraction >= findings.GC_EXPLAINS else "compute"
        # its own gc-spikes are the pauses the others waited for: the straggler finding tells them, with their remedy
        own = [f for f in d.findings if not (cause == "gc" and f.pattern == "gc-spikes")]
        d.findings = findings.rank([findings.Finding(cause, "rank-straggler", s.time_fraction, s), *own])
    elif (merged.aligned - merged.warmup >= MIN_ALIGNED and merged.lost_fraction >= STRAGGLER_MIN
          and not _leads([r.stall_s for r in merged.per_rank])
          and (not merged.events or merged.lost_gc_by_generation[2] >= findings.GC_EXPLAINS)):
        # stalls spread over the ranks, none leading (one that leads but stalled too seldom to be a straggler
        # is no spread either): every rank's pauses add up
        cause = "gc" if sum(merged.lost_gc_by_generation) >= findings.GC_EXPLAINS else "compute"
        stalling = [r for r in merged.per_rank if r.straggled]
        own = {r.rank: r.forced.site for r in stalling if r.forced and r.forced.share >= findings.FORCED_LEADS}
        stalls = RankStalls(merged.ranks, merged.ranks_stalling, merged.unit, merged.straggled_steps, merged.lost_s,
                            merged.lost_fraction, merged.lost_gc_by_generation,
                            own if len(own) == len(stalling) else {})
        d.findings = findings.rank([findings.Finding(cause, "rank-stalls", merged.lost_fraction, stalls), *d.findings])
    if merged.input_straggler:   # its own input-wait, when it is the rank diagnosed, is this finding's
        s = merged.input_straggler
        d.findings = findings.rank([findings.Finding("compute", "rank-input-wait", s.time_fraction, s),
                                    *(f for f in d.findings if f.pattern != "input-wait" or base != s.rank)])
    if merged.compute_straggler:
        s = merged.compute_straggler
        d.findings = findings.rank([findings.Finding("compute", "rank-compute", s.time_fraction, s), *d.findings])
    d.primary_cause = d.findings[0].cause if d.findings else "none"
    d.complete = d.complete and not merged.unfinished and all(s.complete for s in merged.per_rank)
    d.cautions = _cautions(merged)   # the diagnosed rank's too
    return d


def _cautions(merged):
    """What each rank's records leave out (Run.cautions), each named by its rank; too few steps to tell
    whether the ranks wait for each other; and too few aligned units to tell a straggler (MIN_ALIGNED),
    naming the rank that cut them short."""
    cautions = [f"rank {s.rank}: {c}" for s in merged.per_rank for c in s.cautions]
    n = merged.aligned - merged.warmup
    if merged.collective in ("in-step", "between-steps") and merged.drift_steps > SYNC_STEPS:   # too few to say "none"
        cautions.append(f"the ranks' steps wander {merged.drift_steps:.2f} median steps apart, as ranks that never "
                        f"wait for each other do, but {n} {merged.unit}{'' if n == 1 else 's'} are too few to tell "
                        f"(it takes {SYNC_MIN_STEPS}): the stalls are read as if the ranks meet at every step")
    if n < MIN_ALIGNED:
        done = {s.rank: s.steps if merged.unit == "step" else s.epochs for s in merged.per_rank}
        shortest = min((r for r in done if done[r]), key=done.get)
        cut = (f"rank {shortest} finished {done[shortest]:,}, the others up to {max(done.values()):,}"
               if done[shortest] < max(done.values()) else f"every rank finished {done[shortest]:,}")
        cautions.append(f"only {n} {merged.unit}{'' if n == 1 else 's'} after the warm-up {'is' if n == 1 else 'are'} "
                        f"aligned across the ranks ({cut}): too few to tell a straggler")
    return cautions


def _compared_as_is(merged):
    """What a comparison of the job takes as it is: ranks that did not finish, and a warm-up too
    short to leave out (the report's header says both of a job; a comparison said neither)."""
    notes = [f"rank {s.rank} did not finish ({s.status})" for s in merged.per_rank if not s.complete]
    if merged.warmup == 0:
        notes.append(f"too few epochs to leave the warm-up out: its {merged.unit}s are compared too")
    return notes


@dataclass
class JobSide:
    run_dir: str
    label: str
    gc_policy: str | None        # as the ranks recorded it (scripts and scenarios)
    ranks: int
    steps: int                   # aligned steps compared (after the warm-up)
    step_s: float                # the job's mean time per aligned step (the slowest rank's)
    lost_s_per_step: float       # time lost waiting for stalled ranks, per step
    lost_fraction: float
    gc_share: float              # GC pause / wall time, mean over ranks
    straggler: Straggler | None
    cautions: list = field(default_factory=list)   # what its ranks' records leave out, each as "rank N: ..."; too
                                                   # few aligned steps to tell a straggler
    input_straggler: InputStraggler | None = None  # a rank slow to load its batches
    compute_straggler: ComputeStraggler | None = None  # a rank slow at its own work in the step


@dataclass
class RankComparison:
    a: JobSide
    b: JobSide
    step_ratio: float            # b.step_s / a.step_s: below 1, B's steps are faster
    lost_change_s_per_step: float  # b - a
    same_run: bool = False       # A and B are one run directory


def _side(run_dir):
    merged = analyze_ranks(run_dir)
    policy = rundir.read_run(rank_dirs(run_dir)[0].path).gc_policy
    n = merged.aligned - merged.warmup
    name = Path(run_dir).name or str(run_dir)
    return JobSide(run_dir=str(run_dir), label=f"{name} (gc-policy {policy})" if policy else name, gc_policy=policy,
                   ranks=merged.ranks, steps=n, step_s=merged.job_time_s / n, lost_s_per_step=merged.lost_s / n,
                   lost_fraction=merged.lost_fraction,
                   gc_share=float(np.mean([s.gc_share for s in merged.per_rank])), straggler=merged.stragglers,
                   cautions=_cautions(merged) + _compared_as_is(merged), input_straggler=merged.input_straggler,
                   compute_straggler=merged.compute_straggler)


def compare_ranks(run_a, run_b):
    """Two multi-rank runs of a job (say, before and after a --gc-policy): time per step, time lost
    waiting, and the straggler on each side."""
    a, b = _side(run_a), _side(run_b)
    if a.label == b.label:
        a.label, b.label = f"A ({a.label})", f"B ({b.label})"
    return RankComparison(a, b, b.step_s / a.step_s if a.step_s > 0 else 1.0, b.lost_s_per_step - a.lost_s_per_step,
                          same_run=Path(run_a).resolve() == Path(run_b).resolve())
