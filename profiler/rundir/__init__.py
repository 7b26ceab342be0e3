"""The run directory: the one format between capture and analysis (docs/run-directory.md).

    meta.json      written at start, rewritten at the end (atomically: write, then rename)
    epochs.jsonl   one JSON object per finished epoch, appended and flushed as the epoch ends
    steps.bin      one fixed-size record per training step (when steps are recorded)
    gc_events.bin  one fixed-size record per generation-2 or long collection
    rss.bin        one fixed-size record per RSS reading inside epochs with steps (about one a second)

`writer` is what capture uses, `reader` what analysis uses; `format` holds what both agree on.
"""

from ..errors import RunDirError, RunWriteError
from .format import EPOCHS, FORMAT, GC_EVENTS, META, STATUSES, STEPS
from .reader import Run, read_run
from .writer import RunWriter

__all__ = ["EPOCHS", "FORMAT", "GC_EVENTS", "META", "STATUSES", "STEPS", "Run", "RunDirError", "RunWriteError",
           "RunWriter", "read_run"]
