"""How kernels are compiled: numba, cached on disk, each loop nest twice (serial and parallel).

A prange launch costs ~20-40 us on these machines, more than a small kernel's whole run, so every
kernel has a serial twin used below `PARALLEL_MIN` elements. numba's default OpenMP threading layer
stalled 3-10x under load here; `workqueue` did not, so it is the default unless the user chose one.
"""

import os
import types

import numba

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"

PARALLEL_MIN = 1 << 16


def _renamed(fn, suffix):
    """A copy of `fn` under another qualname, so numba's on-disk cache keeps the twins apart."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
    twin.__qualname__ = fn.__qualname__ + suffix
    return twin


class Kernel:
    """A loop nest compiled serial and parallel; call with the work size first."""

    def __init__(self, fn):
        self.serial = numba.njit(cache=True, fastmath=True, nogil=True)(_renamed(fn, "_serial"))
        self.parallel = numba.njit(cache=True, fastmath=True, nogil=True, parallel=True)(_renamed(fn, "_parallel"))
        self.__name__ = fn.__name__

    def __call__(self, size, *args):
        return (self.parallel if size >= PARALLEL_MIN else self.serial)(*args)


def kernel(fn):
    return Kernel(fn)
