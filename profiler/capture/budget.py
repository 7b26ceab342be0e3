"""Reads whose cost grows with the profiled process, kept to a share of its time.

Some light signals cost in proportion to what they walk: counting GC-tracked objects walks every
tracked object, mallinfo2 every free chunk of the heap, a worker's smaps_rollup every page the
worker maps (5-16 ms per GiB here). `Budget.call(read)` runs a read only when the time since the
last one began is at least its cost divided by `share`, so the reads take at most that share of
the process's time however big the heap grows; a read cheaper than `free_ns` puts off nothing.
"""

import time

_now = time.perf_counter_ns


class Budget:
    def __init__(self, share, free_ns=0):
        self.share, self.free_ns = share, free_ns
        self._next_ns = 0   # no read before this time (perf_counter_ns)

    def call(self, read):
        """read() when the budget allows it now, else None."""
        start = _now()
        if start < self._next_ns:
            return None
        self._next_ns = float("inf")   # taken: a second thread's call waits for this read's cost
        try:
            value = read()
        finally:
            cost = _now() - start
            self._next_ns = start + cost + cost / self.share if cost >= self.free_ns else 0
        return value
