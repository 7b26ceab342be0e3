"""Per-step records: wall time and the GC pause inside each training step, by generation.

A step costs two clock reads and two stores into a preallocated int64 buffer laid out as steps.bin's
records (format.STEP_RECORD: epoch, start and end in perf_counter nanoseconds, GC pause by
generation); nothing is allocated per step. The GC timer adds a collection's pause to the open
step (rare: most steps see none). The buffer is written as it is when the epoch ends, whenever it
fills, and at the end of the first step FLUSH_NS after the last write (its epoch slots filled in one
slice assignment, no conversion), so memory stays constant for any number of steps, every finished
epoch's steps are on disk when the next epoch begins, and a process killed inside a long epoch
leaves all but its last second of steps on disk. An abandoned epoch's steps are written and held
with its record, or dropped, those written already included (the Session decides: abandon_epoch).
"""

import array
import time

from ..errors import UsageError
from ..rundir.format import STEP_SLOTS

_now = time.perf_counter_ns
CAPACITY = 8192   # steps buffered between writes: 384 KiB
FLUSH_NS = 1_000_000_000   # steps are written at least this often (one write a second: ~10 us)
_START, _END, _GC0 = 1, 2, 3   # slots of a record (format.STEP_RECORD)
_NO_PAUSES = array.array("q", bytes(8 * (STEP_SLOTS - _GC0)))


class StepRecorder:
    """`with recorder:` (or begin()/end()) times one step; `flush()` writes the buffered steps."""

    __slots__ = ("epoch", "sink", "drop", "open_ns", "_slot", "_size", "_buffer", "_view", "_gc_slots", "_flushed",
                 "_due_ns")

    def __init__(self, sink, drop, capacity=CAPACITY):
        self.sink = sink         # sink(buffer) appends records (a bytes-like object) to steps.bin
        self.drop = drop         # drop(n) removes the last n records appended
        self.epoch = None        # index of the open epoch; steps happen only inside one
        self._flushed = 0        # steps of the open epoch written already (the buffer filled, or FLUSH_NS passed)
        self._due_ns = 0         # a step that ends after this writes the buffer
        self.open_ns = 0         # perf_counter_ns at the start of the open step; 0 when none is open
        self._slot = 0           # first slot of the next record
        self._size = STEP_SLOTS * capacity
        self._buffer = array.array("q", bytes(8 * self._size))
        self._view = memoryview(self._buffer)
        self._gc_slots = []      # first slots of the records a collection's pause was added to (zeroed
                                 # once written): one entry per step, however many collections it saw

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
        if exc_type is not None:   # a step that raised did not finish (a Ctrl-C in a hung step is no 2-s step)
            self.abandon()
            return False
        slot = self._slot
        buffer = self._buffer
        buffer[slot + _START] = start
        buffer[slot + _END] = end
        self.open_ns = 0
        slot += STEP_SLOTS
        self._slot = slot
        if slot == self._size or end > self._due_ns:
            self.flush()
        return False

    begin = __enter__

    def begin_at(self, start_ns):
        """Begin the step at `start_ns`, an earlier perf_counter_ns() reading."""
        self.__enter__()
        self.open_ns = min(start_ns, self.open_ns)

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
        return self._flushed + self._slot // STEP_SLOTS

    def start_epoch(self, index):
        self.epoch, self._flushed = index, 0
        self._due_ns = _now() + FLUSH_NS

    def close_epoch(self):
        """The open epoch's steps are settled (written with its line, held, or cut): none is open."""
        self.epoch, self._flushed = None, 0

    def add_gc(self, generation, pause_ns):
        """Called by the GC timer when a collection ends while a step is open."""
        slot = self._slot
        self._buffer[slot + _GC0 + generation] += pause_ns
        if not self._gc_slots or self._gc_slots[-1] != slot:
            self._gc_slots.append(slot)

    def abandon(self):
        """Drop a step left open (its epoch raised, or a framework's step did not finish)."""
        if self.open_ns:
            self.open_ns = 0
            self._clear_gc(self._slot)

    def discard(self):
        """Drop the open epoch's steps (it was abandoned): those buffered, and those written
        already (the epoch's index is taken again by the next epoch)."""
        self._clear_gc(0)
        self._slot = 0
        flushed, self._flushed = self._flushed, 0
        if flushed:
            self.drop(flushed)

    def _clear_gc(self, first):
        """Zero the GC pauses of the records at or after slot `first`."""
        for slot in self._gc_slots:
            if slot >= first:
                self._buffer[slot + _GC0:slot + STEP_SLOTS] = _NO_PAUSES
        self._gc_slots = [slot for slot in self._gc_slots if slot < first]

    def flush(self):
        """Write the buffered steps (records of the open epoch) to the sink."""
        end = self._slot
        self._due_ns = _now() + FLUSH_NS
        if not end:
            return
        n = end // STEP_SLOTS
        self._buffer[0:end:STEP_SLOTS] = array.array("q", (self.epoch,)) * n
        # counted as written before the write: a signal handler that runs once it is done (the Session's
        # SIGTERM, which writes the epoch) finds them on disk, not in the buffer to write again
        self._slot, self._flushed = 0, self._flushed + n   # written or not, the buffer is free for the next steps
        try:
            self.sink(self._view[:end])
        except BaseException:   # the writer cut the file back to before them
            self._flushed -= n
            raise
        finally:
            if self._gc_slots:
                self._clear_gc(0)
