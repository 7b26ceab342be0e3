"""load(run_dir, purpose) -> Loaded: the one way analysis reads a run: read it, refuse a run with no
finished epoch, and skip the warm-up epochs (JIT compilation, first touch of buffers)."""

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
    skipped = stats.warmup(len(run.epochs))
    return Loaded(run, run.epochs[skipped:], skipped)
