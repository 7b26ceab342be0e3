"""analyze_ranks(multi_rank_dir) -> RankAnalysis: which rank holds the others back, how often, and why.

In a data-parallel job every rank waits at each collective for the slowest one, so one rank's
stall is everyone's lost time, and the ranks that wait show nothing wrong in their own process.
Steps (or epochs, when a rank recorded no steps) are aligned by index across ranks. Per step and
rank, the rank's stall is its excess over the median rank, measured both ways a stall can show:

    stall[r, i] = max(wall[r, i] - wall[m, i],  gc[r, i] - gc[m, i])      m: the median rank

The median rank is a real rank (the lower median: with two ranks, the faster one), so with two
ranks a stall is the whole difference between them, not half of it.

The wall-time term sees a rank whose step boundary lies before the collective (it is slower, the
others are not); the GC term sees one whose stall happens before the collective inside the step
(every rank's step is equally long then, and only the straggler's own GC pause tells it apart).
A step is straggled when its largest stall exceeds STALL_FLOOR of the job's typical step; the job
lost that stall (every other rank waited for it). The straggler is the rank that caused most of
the lost time, and its own GC pauses (by generation) explain the part of its stalls they cover.

Streaming: steps are read in blocks of at most BLOCK_VALUES values across all ranks, straight from
each rank's steps.bin, so memory is bounded by the block and by per-step results, never by
ranks x steps. Nothing here writes sentences: renderers do (profiler.report).
"""

from dataclasses import dataclass, field

import numpy as np

from .. import rundir
from ..rundir.format import STEPS
from ..rundir.ranks import rank_dirs
from ..rundir.reader import STEP_DTYPE
from . import stats

BLOCK_VALUES = 1 << 18   # ranks x steps per block
STALL_FLOOR = 0.10       # a stall counts when it exceeds this share of the job's median step
STRAGGLER_SHARE = 0.5    # a straggler causes at least this share of the lost time...
STRAGGLER_MIN = 0.02     # ...and its stalls cost at least this share of the job's time
FINISHED = ("completed", "halted")


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
    gc_share: float              # GC pause / wall over the rank's whole run
    gc_pause_s: list             # GC pause by generation over the whole run
    rss_growth_bytes_per_epoch: float
    straggled: int = 0           # aligned steps this rank held the others back
    stall_s: float = 0.0         # the time those stalls cost the job


@dataclass
class RankAnalysis:
    run_dir: str
    ranks: int
    unit: str                    # "step" or "epoch": what was aligned across ranks
    aligned: int                 # indices every rank finished
    job_time_s: float            # sum over aligned indices of the slowest rank's time
    median_s: float              # the job's median step (slowest rank per step)
    lost_s: float                # time the job lost waiting for stalled ranks
    lost_fraction: float
    straggled_steps: int         # aligned steps with a stall above the floor
    stragglers: dict | None      # {"rank", "time_fraction", "gc_explained_fraction", ...} or None
    per_rank: list = field(default_factory=list)   # RankSummary per rank, by rank
    unfinished: list = field(default_factory=list)  # {"rank", "status", "last_step", "steps", "epochs"}


@dataclass
class RankHeatmap:
    """Stall by rank and step bin (max within the bin), for the rank x step figure."""
    unit: str
    edges: np.ndarray            # bin edges in aligned indices, len(bins) + 1
    stall_s: np.ndarray          # (ranks, bins) largest stall in the bin
    gc2: np.ndarray              # (ranks, bins) True where a generation-2 pause fell in the bin


class _Source:
    """One rank's aligned series, read block by block: steps.bin when every rank has steps, else epochs."""

    def __init__(self, path, unit):
        self.path, self.unit = path, unit

    def read(self, start, stop):
        """(wall, gc[3]) for indices [start, stop) as float64 arrays."""
        if self.unit == "step":
            rec = np.fromfile(self.path / STEPS, dtype=STEP_DTYPE, count=stop - start,
                              offset=start * STEP_DTYPE.itemsize)
            return (rec["wall_s"].astype(float),
                    np.stack([rec["gc0_s"], rec["gc1_s"], rec["gc2_s"]]).astype(float))
        epochs = rundir.read_run(self.path).epochs[start:stop]
        return (np.array([e["wall_s"] for e in epochs], float),
                np.array([e["gc"]["pause_s"] for e in epochs], float).reshape(-1, 3).T)


def _summary(rank_dir, unit):
    run = rundir.read_run(rank_dir.path)
    steps = run.steps()
    epochs = run.epochs
    if unit == "step":
        wall = np.asarray(steps["wall_s"], float)
        pause = [float(np.sum(steps[f"gc{g}_s"], dtype=float)) for g in range(3)]
    else:
        wall = np.array([e["wall_s"] for e in epochs], float)
        pause = [float(sum(e["gc"]["pause_s"][g] for e in epochs)) for g in range(3)]
    total = float(wall.sum())
    used = epochs[stats.warmup(len(epochs)):]
    rss_rate = stats.slope([e["epoch"] for e in used], [e["rss_bytes"] for e in used]) if used else 0.0
    return RankSummary(
        rank=rank_dir.rank, local_rank=rank_dir.local_rank, host=rank_dir.host, status=run.status,
        epochs=len(epochs), steps=len(steps), last_step=(len(wall) - 1) if len(wall) else None,
        median_s=float(np.median(wall)) if len(wall) else 0.0,
        gc_share=sum(pause) / total if total > 0 else 0.0, gc_pause_s=pause, rss_growth_bytes_per_epoch=rss_rate)


def _blocks(sources, aligned):
    """(start, stop, wall (ranks, k), gc (3, ranks, k)) over the aligned indices."""
    k = max(1, BLOCK_VALUES // len(sources))
    for start in range(0, aligned, k):
        stop = min(start + k, aligned)
        wall = np.empty((len(sources), stop - start))
        gc = np.empty((3, len(sources), stop - start))
        for r, source in enumerate(sources):
            wall[r], gc[:, r] = source.read(start, stop)
        yield start, stop, wall, gc


def _median_rank(values, axis):
    """The lower median along `axis`: the value of an actual rank."""
    middle = (values.shape[axis] - 1) // 2
    return np.take(np.partition(values, middle, axis=axis), [middle], axis=axis)


def _stalls(wall, gc):
    """stall (ranks, k) and GC pause by generation above the median rank's (3, ranks, k)."""
    gc_total = gc.sum(axis=0)
    stall = np.maximum(wall - _median_rank(wall, 0), gc_total - _median_rank(gc_total, 0))
    gc_excess = np.clip(gc - _median_rank(gc, 1), 0.0, None)
    return stall, gc_excess


def _count(rank_dir, unit):
    if unit == "step":
        file = rank_dir.path / STEPS
        return file.stat().st_size // STEP_DTYPE.itemsize if file.exists() else 0
    return len(rundir.read_run(rank_dir.path).epochs)


def _open(run_dir):
    """The checked rank directories, the unit to align (steps when every rank has them) and how many."""
    dirs = rank_dirs(run_dir)
    unit = "step" if all(_count(d, "step") for d in dirs) else "epoch"
    return dirs, unit


def analyze_ranks(run_dir):
    """Merge the ranks of a multi-rank run directory (RunDirError if they do not form one job)."""
    dirs, unit = _open(run_dir)
    per_rank = [_summary(d, unit) for d in dirs]
    counts = [s.steps if unit == "step" else s.epochs for s in per_rank]
    aligned = min(counts)
    if aligned == 0:
        empty = [s.rank for s in per_rank if (s.steps if unit == "step" else s.epochs) == 0]
        raise rundir.RunDirError(f"rank(s) {', '.join(map(str, empty))} in {run_dir} finished no {unit}s: "
                                 f"nothing to align across ranks")
    sources = [_Source(d.path, unit) for d in dirs]
    job = np.empty(aligned)         # the slowest rank's time per index
    top = np.empty(aligned, int)    # the rank with the largest stall per index
    top_stall = np.empty(aligned)
    top_gc = np.empty((3, aligned))  # that rank's GC pause above the median rank, by generation
    for start, stop, wall, gc in _blocks(sources, aligned):
        stall, gc_excess = _stalls(wall, gc)
        cols = np.arange(stop - start)
        job[start:stop] = wall.max(axis=0)
        top[start:stop] = stall.argmax(axis=0)
        top_stall[start:stop] = stall[top[start:stop], cols]
        top_gc[:, start:stop] = gc_excess[:, top[start:stop], cols]

    median = float(np.median(job))
    straggled = top_stall > STALL_FLOOR * median
    lost = np.where(straggled, top_stall, 0.0)
    job_time, lost_total = float(job.sum()), float(lost.sum())
    n = len(dirs)
    counts_by_rank = np.bincount(top[straggled], minlength=n)
    stall_by_rank = np.bincount(top[straggled], weights=top_stall[straggled], minlength=n)
    for s, c, t in zip(per_rank, counts_by_rank, stall_by_rank):
        s.straggled, s.stall_s = int(c), float(t)

    stragglers = None
    worst = int(stall_by_rank.argmax())
    if (lost_total > 0 and stall_by_rank[worst] >= STRAGGLER_SHARE * lost_total
            and stall_by_rank[worst] >= STRAGGLER_MIN * job_time):
        mine = straggled & (top == worst)
        gc_mine = top_gc[:, mine]
        # its GC above the median rank's, scaled down where it exceeds the stall it explains
        cap = np.minimum(1.0, top_stall[mine] / np.maximum(gc_mine.sum(axis=0), 1e-12))
        by_gen = (gc_mine * cap).sum(axis=1) / stall_by_rank[worst]
        others = [s.rss_growth_bytes_per_epoch for s in per_rank if s.rank != worst]
        half = len(np.flatnonzero(mine)) // 2
        stalls = top_stall[mine]
        stragglers = {
            "rank": worst, "time_fraction": float(stall_by_rank[worst] / job_time),
            "gc_explained_fraction": float(by_gen.sum()),
            "gc_explained_by_generation": [float(x) for x in by_gen],
            "steps": int(counts_by_rank[worst]), "step_fraction": float(counts_by_rank[worst] / aligned),
            "stall_s": float(stall_by_rank[worst]), "median_stall_s": float(np.median(stalls)),
            "stall_growth": float(np.mean(stalls[-half:]) / np.mean(stalls[:half])) if half else 1.0,
            "mean_interval": float(aligned / counts_by_rank[worst]),
            "rss_growth_bytes_per_epoch": per_rank[worst].rss_growth_bytes_per_epoch,
            "others_rss_growth_bytes_per_epoch": float(np.median(others)) if others else 0.0,
            "share_of_lost": float(stall_by_rank[worst] / lost_total),
        }
    unfinished = [{"rank": s.rank, "status": s.status, "last_step": s.last_step, "steps": s.steps,
                   "epochs": s.epochs} for s in per_rank if s.status not in FINISHED]
    return RankAnalysis(
        run_dir=str(run_dir), ranks=n, unit=unit, aligned=aligned, job_time_s=job_time, median_s=median,
        lost_s=lost_total, lost_fraction=lost_total / job_time if job_time > 0 else 0.0,
        straggled_steps=int(straggled.sum()), stragglers=stragglers, per_rank=per_rank, unfinished=unfinished)


def rank_heatmap(run_dir, bins=400):
    """Each rank's largest stall per bin of aligned steps, and where its generation-2 pauses fell."""
    dirs, unit = _open(run_dir)
    sources = [_Source(d.path, unit) for d in dirs]
    aligned = min(_count(d, unit) for d in dirs)
    edges = np.unique(np.linspace(0, aligned, min(bins, max(aligned, 1)) + 1).astype(int))
    stall_map = np.zeros((len(dirs), len(edges) - 1))
    gc2_map = np.zeros((len(dirs), len(edges) - 1), bool)
    for start, stop, wall, gc in _blocks(sources, aligned):
        stall, _ = _stalls(wall, gc)
        which = np.searchsorted(edges, np.arange(start, stop), side="right") - 1
        for b in np.unique(which):
            cols = which == b
            stall_map[:, b] = np.maximum(stall_map[:, b], stall[:, cols].max(axis=1))
            gc2_map[:, b] |= (gc[2][:, cols] > 0).any(axis=1)
    return RankHeatmap(unit=unit, edges=edges, stall_s=np.clip(stall_map, 0.0, None), gc2=gc2_map)
