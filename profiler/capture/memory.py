"""Light memory signals, read once per epoch: process RSS (psutil) and, on glibc, malloc's bytes in use.

RSS alone misses leaks that fit in memory the allocator already holds (freed earlier and reused);
mallinfo2's in-use count (small blocks + mmapped blocks) moves with every allocation that is kept,
whatever RSS does. Elsewhere (musl, macOS, Windows) malloc_bytes is None.
"""

import ctypes
import ctypes.util

import psutil


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _mallinfo2():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2
    return fn


class MemoryProbe:
    def __init__(self):
        self._process = psutil.Process()
        self._mallinfo2 = _mallinfo2()

    def read(self):
        """(rss_bytes, malloc_bytes or None)."""
        rss = self._process.memory_info().rss
        if self._mallinfo2 is None:
            return rss, None
        info = self._mallinfo2()
        return rss, info.uordblks + info.hblkhd
