"""The run-directory format: file names, statuses and the binary record layouts (docs/run-directory.md).

Writer and reader both take their layouts from here, so the format lives in one place.
Binary records are little-endian and fixed-size: a file's length tells how many records it holds,
and a crash mid-write leaves at most one partial record at the end, which readers drop.
"""

import os
import re
import struct
from pathlib import Path

import numpy as np

from ..errors import UsageError

FORMAT = 1
META, EPOCHS, STEPS, GC_EVENTS, RSS = "meta.json", "epochs.jsonl", "steps.bin", "gc_events.bin", "rss.bin"
RECORDS = (META, EPOCHS, STEPS, GC_EVENTS, RSS)   # the files a run directory holds
STATUSES = ("running", "completed", "halted", "failed", "interrupted", "terminated")
RANK_PREFIX = "rank-"

# One training step as the Session writes it (steps.bin): six int64 slots, so the capture's buffer
# (an array of int64) is written as it is: epoch index, start and end (time.perf_counter_ns()
# readings; meta.json's clock_origin_ns is the origin) and the GC pause inside the step by
# generation, in nanoseconds.
STEP_RECORD = np.dtype([("epoch", "<i8"), ("start_ns", "<i8"), ("end_ns", "<i8"), ("gc0_ns", "<i8"),
                        ("gc1_ns", "<i8"), ("gc2_ns", "<i8")])
STEP_SLOTS = len(STEP_RECORD.names)

# One training step as readers see it (Run.steps()): start in seconds since the clock origin, wall
# time, GC pause by generation.
STEP_FIELDS = (("epoch", "<i8"), ("start_s", "<f8"), ("wall_s", "<f8"), ("gc0_s", "<f8"), ("gc1_s", "<f8"),
               ("gc2_s", "<f8"))
STEP_DTYPE = np.dtype(list(STEP_FIELDS))

# steps.bin of runs written before clock_origin_ns (meta.json has none): the step in seconds.
LEGACY_STEP_DTYPE = np.dtype([("epoch", "<i4"), ("start_s", "<f8"), ("wall_s", "<f4"), ("gc0_s", "<f4"),
                              ("gc1_s", "<f4"), ("gc2_s", "<f4")])

# The process's resident memory inside epochs with steps (rss.bin), read as the steps are written, at
# most once a second: when (a perf_counter_ns() reading, as steps.bin's), the epoch whose steps were
# being written, the resident bytes and of them the shared ones (pages of mapped files and shared
# memory: a memory-mapped dataset's). An epoch's record holds its RSS at its end only; these show a
# long epoch's memory on the way (an LLM's one epoch, a job the OOM killer stopped).
RSS_SAMPLE = struct.Struct("<qqqq")
RSS_RECORD = np.dtype([("t_ns", "<i8"), ("epoch", "<i8"), ("rss_bytes", "<i8"), ("shared_bytes", "<i8")])
# as readers see them: t_s in seconds since the clock origin
RSS_DTYPE = np.dtype([("t_s", "<f8"), ("epoch", "<i8"), ("rss_bytes", "<i8"), ("shared_bytes", "<i8")])

FORCED_SITES = 3   # the lines an epoch record's gc.forced_sites keeps, the longest paused first
DATALOADER_OP = "DataLoader.__next__"   # the op a torch DataLoader's next batch is timed as: the step's wait for data
BACKWARD_OP = "Tensor.backward"   # the op a torch loss.backward() call is timed as: under DDP, the all-reduce's wait too
SOURCE_SHA256 = "source_sha256"   # meta's key of a script's or module's file hash (hex), which compare tells runs by
EPOCH_LIMIT = 1 << 63   # epoch indices are below this: steps.bin holds them as int64
# the epoch record's fields the Session writes itself (the reader adds "from_steps"): no add_epoch_field's
SESSION_FIELDS = ("epoch", "start_s", "wall_s", "steps", "gc", "rss_bytes", "malloc_bytes", "heap", "ops", "gap_s",
                  "gc_before", "unfinished", "from_steps")
EPOCHS_FROM = "epochs_from"   # meta's key of where `profiler run` found the epochs it wrote ("torch", "windows", ...)

# One garbage collection worth keeping (every generation-2 one, and any above the Session's
# threshold): start (seconds since the clock origin), duration, generation, objects collected.
GC_EVENT = struct.Struct("<dfBI")
GC_EVENT_FIELDS = (("start_s", "<f8"), ("duration_s", "<f4"), ("generation", "u1"), ("collected", "<u4"))
GC_EVENT_DTYPE = np.dtype(list(GC_EVENT_FIELDS))


def replaceable(path):
    """Whether `path` is absent, or holds nothing but what a run writes there: a run's records, or
    a job's rank-N runs (a file of anyone else's in it is not removed with them), so a rerun may
    replace it."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return True
    if path.is_symlink() or not path.is_dir():   # a link's target is no run of this directory's
        return False
    entries = list(path.iterdir())
    return (all(e.name in RECORDS or e.name == META + ".tmp" for e in entries)   # a run (.tmp: one cut short)
            and all(e.is_file() and not e.is_symlink() for e in entries)
            or all(e.name.startswith(RANK_PREFIX) and replaceable(e) for e in entries))


def run_path(value, what):
    """`value` as the Path of a run directory; UsageError unless it is a non-empty str or
    os.PathLike (`what` names the argument in the message: "Session run_dir", "analyze()")."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        shown = repr(value)   # cut short: a Run or a list of records would fill the screen
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        raise UsageError(f"{what} {shown}: expected a path (str or os.PathLike), got {type(value).__name__}")
    path = os.fspath(value)
    if not isinstance(path, str) or not path.strip():
        raise UsageError(f"{what} {value!r}: expected a non-empty path")
    if "\0" in path:
        raise UsageError(f"{what} {value!r}: a path cannot hold a null byte")
    return Path(path)


MAX_ERROR_CHARS = 10_000   # of meta.json's error: what reads it (wrapping a verdict) takes time with its length
_CUT = re.compile(rf"(?s).{{{MAX_ERROR_CHARS}}}\.\.\. \([\d,]+ characters\)")


def capped_error(text):
    """meta.json's error, cut to MAX_ERROR_CHARS with its length said; one cut already stays as it is."""
    if len(text) <= MAX_ERROR_CHARS or _CUT.fullmatch(text):
        return text
    return f"{text[:MAX_ERROR_CHARS]}... ({len(text):,} characters)"
