"""load(run_dir, purpose) -> Loaded: the one way analysis reads a run: read it, refuse a run with no
finished epoch, and skip the warm-up epochs (JIT compilation, first touch of buffers) and, in a run
with steps, the epochs before its first step."""

from dataclasses import dataclass

from .. import rundir
from ..errors import RunDirError
from . import stats


@dataclass
class Loaded:
    run: rundir.Run
    records: list          # the epoch records after the warm-up
    skipped: int           # warm-up epochs left out


def load(run_dir, purpose="analyze"):
    """The run and its epoch records after the warm-up; RunDirError if it has no finished epoch."""
    run = rundir.read_run(run_dir)
    if not run.epochs:
        raise RunDirError(f"{run.path} has no finished epochs to {purpose}"
                          + (f" ({'; '.join(run.problems)})" if run.problems else ""))
    # time windows that ran before the first step (a script's set-up: imports, data, the model)
    # are no training: left out with the warm-up
    first_stepped = next((i for i, r in enumerate(run.epochs) if r.get("steps")), 0)
    skipped = first_stepped + stats.warmup(len(run.epochs) - first_stepped)
    return Loaded(run, run.epochs[skipped:], skipped)
