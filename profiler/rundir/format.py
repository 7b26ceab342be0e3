"""The run-directory format: file names, statuses and the binary record layouts (docs/run-directory.md).

Writer and reader both take their layouts from here, so the format lives in one place.
Binary records are little-endian and fixed-size: a file's length tells how many records it holds,
and a crash mid-write leaves at most one partial record at the end, which readers drop.
"""

import struct

import numpy as np

FORMAT = 1
META, EPOCHS, STEPS, GC_EVENTS = "meta.json", "epochs.jsonl", "steps.bin", "gc_events.bin"
STATUSES = ("running", "completed", "halted", "failed", "interrupted", "terminated")
RANK_PREFIX = "rank-"

# One training step: epoch index, start (seconds since the session's clock origin), wall time,
# GC pause inside the step by generation.
STEP = struct.Struct("<idffff")
STEP_FIELDS = (("epoch", "<i4"), ("start_s", "<f8"), ("wall_s", "<f4"), ("gc0_s", "<f4"), ("gc1_s", "<f4"),
               ("gc2_s", "<f4"))
STEP_DTYPE = np.dtype(list(STEP_FIELDS))    # the same record as a numpy structured type (STEP.size bytes)

# One garbage collection worth keeping (every generation-2 one, and any above the Session's
# threshold): start (seconds since the clock origin), duration, generation, objects collected.
GC_EVENT = struct.Struct("<dfBI")
GC_EVENT_FIELDS = (("start_s", "<f8"), ("duration_s", "<f4"), ("generation", "u1"), ("collected", "<u4"))
GC_EVENT_DTYPE = np.dtype(list(GC_EVENT_FIELDS))
