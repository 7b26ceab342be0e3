"""Scratch memory a caller keeps across kernel calls, so steady-state training allocates nothing,
and the arrays the kernels allocate: each starts on a 64-byte cache line."""

import ctypes
import math
import numbers

import numpy as np

LINE = 64   # bytes


def aligned_empty(shape, dtype=np.float32):
    """np.empty(shape, dtype), but starting on a 64-byte cache line. numpy's large arrays start
    16-48 bytes past one, where a block's vector runs straddle two lines and the memory-bound loops
    ran 1.05-1.3x slower (docs/performance.md, session 20); the seed models' training steps took
    0.89-0.95x the time with every buffer on a line (session 34). Every kernel that allocates its
    result calls this, so it is kept cheap: ~2 us against np.empty's ~0.2 (ndarray.ctypes alone
    costs ~1 us; ctypes' from_buffer reads the address in ~0.3, session 41)."""
    if type(shape) is not tuple:
        shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    if min(shape, default=0) < 0:
        raise ValueError(f"aligned_empty: negative dimensions are not allowed, got shape {shape}")
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + LINE, np.uint8)
    skip = -ctypes.addressof(ctypes.c_char.from_buffer(raw)) % LINE
    return raw[skip:skip + nbytes].view(dtype).reshape(shape)


def on_a_line(a):
    """Whether array `a` starts on a 64-byte cache line. conv2d reads a caller's w in place along
    a block's lanes (vector loads of J floats) only if it does: off a line every load straddles
    two, and a copy on a line costs less. dense's forward reads w, and conv2d's weight grads dy,
    in place wherever they start: there a copy costs more (docs/performance.md, session 37)."""
    return a.ctypes.data % LINE == 0


def aligned_zeros(shape, dtype=np.float32):
    """np.zeros(shape, dtype), starting on a 64-byte cache line (aligned_empty)."""
    a = aligned_empty(shape, dtype)
    a[...] = 0
    return a


class Workspace:
    """Named buffers that grow to the largest request and are then reused, each on a cache line."""

    def __init__(self):
        self._buffers = {}

    def take(self, name, shape, dtype=np.float32):
        size = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = self._buffers[name] = aligned_empty((size,), dtype)
        return buf[:size].reshape(shape)

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self._buffers.values())
