"""Per-step records: wall time and the GC pause inside each training step, by generation.

A step costs two clock reads and two stores into preallocated int64 arrays (start and end, in
perf_counter nanoseconds); nothing is allocated per step. The GC timer adds a collection's pause to
the open step (rare: most steps see none). The buffer is packed into steps.bin records
(format.STEP_DTYPE, 28 bytes each) when the epoch ends and whenever it fills, so memory stays constant
for any number of steps and every finished epoch's steps are on disk when the next epoch begins.
"""

import array
import time

import numpy as np

from ..errors import UsageError
from ..rundir.format import STEP_DTYPE

_now = time.perf_counter_ns
CAPACITY = 8192   # steps buffered between writes: 2 x 64 KiB


class StepRecorder:
    """`with recorder:` (or begin()/end()) times one step; `flush()` writes the buffered steps."""

    __slots__ = ("epoch", "origin_ns", "sink", "open_ns", "_n", "_capacity", "_starts", "_ends", "_gc_steps",
                 "_flushed")

    def __init__(self, origin_ns, sink, capacity=CAPACITY):
        self.origin_ns, self.sink = origin_ns, sink   # sink(bytes) appends packed records to steps.bin
        self.epoch = None        # index of the open epoch; steps happen only inside one
        self._flushed = 0        # steps of the open epoch written already (the buffer filled)
        self.open_ns = 0         # perf_counter_ns at the start of the open step; 0 when none is open
        self._n = 0
        self._capacity = capacity
        self._starts = array.array("q", bytes(8 * capacity))
        self._ends = array.array("q", bytes(8 * capacity))
        self._gc_steps = {}      # buffer index -> [g0, g1, g2] ns, for the few steps a collection ran in
                                 # (filled by the GC timer through add_gc, so a step itself never looks)

    def __enter__(self):
        if self.open_ns or self.epoch is None:
            self._refuse_begin()
        self.open_ns = _now()
        return self

    def __exit__(self, exc_type, exc, tb):
        end = _now()
        start = self.open_ns
        if not start:
            raise UsageError("end_step() without begin_step(): call begin_step() when the step starts")
        n = self._n
        self._starts[n] = start
        self._ends[n] = end
        self.open_ns = 0
        n += 1
        self._n = n
        if n == self._capacity:
            self.flush()
        return False

    begin = __enter__

    def end(self):
        self.__exit__(None, None, None)

    def _refuse_begin(self):
        if self.epoch is None:
            raise UsageError("session.step() outside an epoch: record steps inside `with session.epoch(...)` "
                             "(or between begin_epoch() and end_epoch())")
        raise UsageError("a step started inside another step: end it first (steps do not nest)")

    @property
    def recorded(self):
        """Steps recorded in the open epoch."""
        return self._flushed + self._n

    def start_epoch(self, index):
        self.epoch, self._flushed = index, 0

    def add_gc(self, generation, pause_ns):
        """Called by the GC timer when a collection ends while a step is open."""
        pauses = self._gc_steps.get(self._n)
        if pauses is None:
            pauses = self._gc_steps[self._n] = [0, 0, 0]
        pauses[generation] += pause_ns

    def abandon(self):
        """Drop a step left open (its epoch raised, or a framework's step did not finish)."""
        if self.open_ns:
            self.open_ns = 0
            self._gc_steps.pop(self._n, None)

    def discard(self):
        """Drop the buffered steps (their epoch was abandoned, unwritten)."""
        self._n, self._gc_steps = 0, {}

    def flush(self):
        """Pack the buffered steps into STEP records and hand them to the sink."""
        n = self._n
        if not n:
            return
        self._n = 0
        self._flushed += n
        gc_steps, self._gc_steps = self._gc_steps, {}
        starts = np.frombuffer(self._starts, np.int64, n)
        ends = np.frombuffer(self._ends, np.int64, n)
        records = np.zeros(n, STEP_DTYPE)
        records["epoch"] = self.epoch
        records["start_s"] = (starts - self.origin_ns) / 1e9
        records["wall_s"] = (ends - starts) / 1e9
        for index, pauses in gc_steps.items():
            for generation in range(3):
                records[f"gc{generation}_s"][index] = pauses[generation] / 1e9
        del starts, ends   # release the views of the buffers
        self.sink(records.tobytes())
