"""load(run_dir, purpose) -> Loaded: the one way analysis reads a run: read it, refuse a run with no
finished epoch, and skip the warm-up epochs (JIT compilation, first touch of buffers) and, in a run
with steps, the epochs before its first step."""

from dataclasses import dataclass

import numpy as np

from .. import rundir
from ..errors import RunDirError
from . import stats


@dataclass
class Loaded:
    run: rundir.Run
    records: list          # the epoch records after the warm-up
    skipped: int           # epochs left out at the start: the set-up's, then the warm-up
    warmup: int = 0        # of those, the warm-up


def load(run_dir, purpose="analyze"):
    """The run (a run directory, or a Run read already) and its epoch records after the warm-up;
    RunDirError if it has no finished epoch."""
    run = run_dir if isinstance(run_dir, rundir.Run) else rundir.read_run(run_dir)
    if not run.epochs:
        raise RunDirError(f"{run.path} has no finished epochs to {purpose}"
                          + (f" ({'; '.join(run.problems)})" if run.problems else ""))
    setup, warmup = left_out(run.epochs)
    return Loaded(run, run.epochs[setup + warmup:], setup + warmup, warmup)


def gapped(loaded):
    """The records whose gap_s is time between training epochs: all, but the first when the epoch
    before it is set-up's (a script's imports and data loading, which its time windows covered, are
    no gap of the training's)."""
    setup = loaded.skipped - loaded.warmup
    return loaded.records[1:] if setup and not loaded.warmup else loaded.records


def left_out(epochs):
    """(set-up, warm-up): the epochs to leave out at the start of a run's `epochs`. In a run with
    steps, the epochs before its first step are its set-up (time windows through imports, data,
    the model), no training; then the warm-up (stats.warmup) of the rest."""
    setup = next((i for i, r in enumerate(epochs) if r.get("steps")), 0)
    return setup, stats.warmup(len(epochs) - setup)


def stopped_start(run):
    """When the epoch the run stopped in began, when the run did not complete and that epoch is not
    among `run.epochs` (its unfinished line kept apart, or no line at all: killed, its steps on disk
    after the last line); else None."""
    if run.status in ("completed", "halted") or run.ends_unfinished:
        return None
    if run.unfinished_epoch is not None:
        return run.unfinished_epoch.get("start_s")
    every, kept = run.steps(every=True), len(run.steps())
    return float(every[kept]["start_s"]) if len(every) > kept else None


CUT_SHORT = 0.5   # a last epoch of under this share of the others' median steps was cut short


def cut_short(records):
    """(the index of the last record, the others' median steps) when its epoch was cut short (a
    `break` out of the loop, an early stop, Lightning's max_steps): its steps under CUT_SHORT of
    that median (of at least two with steps) and of the last epoch with steps before it; else
    None. Its time is no full epoch's: it would read as the epochs getting faster. Where the epoch
    before it is as short, both are whole epochs of a smaller size (a second fit() of fewer
    batches)."""
    steps = [r.get("steps") or 0 for r in records]
    others = [n for n in steps[:-1] if n]
    if len(others) < 2:
        return None
    median = float(np.median(others))
    return (len(records) - 1, median) if steps[-1] < CUT_SHORT * min(median, others[-1]) else None


def weighed(records):
    """Indices of the records the epoch-time trend may be fitted on (one_size picks from them):
    timed()'s, but a last epoch cut short."""
    cut = cut_short(records)
    return [i for i in timed(records) if cut is None or i != cut[0]]


STEPS_APART = 1.05   # epochs whose steps differ more than this hold different work


def one_work(a, b):
    """Whether epochs of a and b steps hold one work (within STEPS_APART of each other)."""
    return min(a, b) * STEPS_APART >= max(a, b)


def one_size(records):
    """The epochs the epoch-time trend is fitted on: (the indices of the longest run of consecutive
    weighed() epochs whose steps are within STEPS_APART of its first's, the later of two as long;
    (steps, epochs, fewest, most)) where the weighed epochs' steps differ by more than that (two
    fit() calls of other batch sizes), else (weighed(), None): an epoch of twice the steps is no
    slowdown, and an epoch's fixed cost (its validation) makes time no multiple of steps, so the
    trend is of epochs of one size."""
    trended = weighed(records)
    steps = [records[i].get("steps") or 0 for i in trended]
    if len(steps) < 2 or not all(steps) or one_work(min(steps), max(steps)):
        return trended, None
    best, start = (0, 0), 0
    for k in range(1, len(steps) + 1):
        if k == len(steps) or not one_work(steps[start], steps[k]):
            best, start = max(best, (k - start, start)), k
    length, first = best
    return trended[first:first + length], (int(steps[first]), length, int(min(steps)), int(max(steps)))


def timed(records):
    """Indices of the records whose time analysis weighs: deep capture's traced epochs, which
    tracemalloc slows 2-10x, are left out when the others are the majority."""
    untraced = [i for i, r in enumerate(records) if r.get("heap") is None]
    return untraced if 2 * len(untraced) > len(records) else list(range(len(records)))
