"""Light memory signals, read once per epoch: process RSS and, on glibc, malloc's bytes in use (and
RSS with its shared part about once a second inside epochs with steps: the Session's rss.bin).

RSS alone misses leaks that fit in memory the allocator already holds (freed earlier and reused);
mallinfo2's in-use count (small blocks + mmapped blocks) moves with every allocation that is kept,
whatever RSS does. Elsewhere (musl, macOS, Windows) malloc_bytes is None.

On Linux RSS is read from /proc/self/statm through a descriptor kept open (~1 us; psutil reads the
same file but opens it each time, ~12 us); elsewhere psutil. mallinfo2 is looked up in the
symbols already loaded into the process (ctypes.CDLL(None)), without ctypes.util, whose import
alone adds ~600 GC-tracked objects to the profiled process.

mallinfo2 walks every free chunk in every arena while holding the arena's lock: ~2 us on a young
heap, 36 ms on one with 200,000 free chunks (the project's VM), and 10-50 us now and then on a
young one right after training has filled the caches. It is read at every epoch end while a read
costs under MALLINFO_EVERY_EPOCH_NS; after a read that costs more, the next waits until the time
since is at least 1/MALLINFO_BUDGET times that read's cost (budget.py: 1%, so such a spike delays
at most the next few millisecond-long epochs' reads), and malloc_bytes is None in the epochs
between (RSS is read every epoch).
"""

import ctypes
import os

from .budget import Budget

_STATM = "/proc/self/statm"
MALLINFO_EVERY_EPOCH_NS = 20_000
MALLINFO_BUDGET = 0.01


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = _Mallinfo2
    return fn


class MemoryProbe:
    def __init__(self):
        self._mallinfo2 = _mallinfo2()
        self._budget = Budget(MALLINFO_BUDGET, free_ns=MALLINFO_EVERY_EPOCH_NS)
        self._statm = self._process = None
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._statm = os.open(_STATM, os.O_RDONLY)
        except (OSError, AttributeError, ValueError):
            pass

    def rss(self):
        return self.resident()[0]

    def resident(self):
        """(RSS, its shared part: pages of mapped files and shared memory; 0 where not told) in bytes."""
        if self._statm is not None:
            fields = os.pread(self._statm, 128, 0).split()
            return int(fields[1]) * self._page, int(fields[2]) * self._page
        if self._process is None:
            import psutil
            self._process = psutil.Process()
        info = self._process.memory_info()
        return info.rss, getattr(info, "shared", 0)

    def read(self):
        """(rss_bytes, malloc_bytes), malloc_bytes None off glibc or when its budget skips the read."""
        return self.rss(), self.malloc()

    def malloc(self):
        if self._mallinfo2 is None:
            return None
        info = self._budget.call(self._mallinfo2)
        return None if info is None else info.uordblks + info.hblkhd

    def close(self):
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
