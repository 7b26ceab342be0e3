"""Scratch memory a caller keeps across kernel calls, so steady-state training allocates nothing."""

import math

import numpy as np


class Workspace:
    """Named buffers that grow to the largest request and are then reused."""

    def __init__(self):
        self._buffers = {}

    def take(self, name, shape, dtype=np.float32):
        size = math.prod(shape)
        buf = self._buffers.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = self._buffers[name] = np.empty(size, dtype)
        return buf[:size].reshape(shape)

    @property
    def nbytes(self):
        return sum(b.nbytes for b in self._buffers.values())
