"""Light memory signals, read once per epoch: process RSS and, on glibc, malloc's bytes in use.

RSS alone misses leaks that fit in memory the allocator already holds (freed earlier and reused);
mallinfo2's in-use count (small blocks + mmapped blocks) moves with every allocation that is kept,
whatever RSS does. Elsewhere (musl, macOS, Windows) malloc_bytes is None.

On Linux RSS is read from /proc/self/statm through a descriptor kept open (~1 us; psutil reads the
same file but opens it each time, ~12 us); elsewhere psutil. mallinfo2 is looked up in the
symbols already loaded into the process (ctypes.CDLL(None)), without ctypes.util, whose import
alone adds ~600 GC-tracked objects to the profiled process.
"""

import ctypes
import os

_STATM = "/proc/self/statm"


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
        self._statm = self._process = None
        try:
            self._page = os.sysconf("SC_PAGE_SIZE")
            self._statm = os.open(_STATM, os.O_RDONLY)
        except (OSError, AttributeError, ValueError):
            pass

    def rss(self):
        if self._statm is not None:
            return int(os.pread(self._statm, 128, 0).split()[1]) * self._page
        if self._process is None:
            import psutil
            self._process = psutil.Process()
        return self._process.memory_info().rss

    def read(self):
        """(rss_bytes, malloc_bytes or None)."""
        if self._mallinfo2 is None:
            return self.rss(), None
        info = self._mallinfo2()
        return self.rss(), info.uordblks + info.hblkhd

    def close(self):
        if self._statm is not None:
            os.close(self._statm)
            self._statm = None
