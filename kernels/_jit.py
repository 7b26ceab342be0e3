"""How kernels are compiled: numba, cached on disk, each loop nest twice (serial and parallel).

IEEE float semantics (error_model="numpy"): a NaN or a division by zero yields NaN/inf for the
caller to check, never an exception from inside compiled code. A prange launch costs ~20-40 us on
these machines, more than a small kernel's whole run, so every kernel has a serial twin used below
`PARALLEL_MIN` elements.

Threading layer (unless the user chose one): TBB where it loads, else `workqueue`. A training step
launches ~100 parallel regions, and with workqueue cifar10-cnn's NHWC step ran 74-85 ms median on
2 threads against 42-66 with TBB (102-104 vs 88-89 on 1 thread). Our reading of why: workqueue
splits each region statically and wakes sleeping workers for it, so one slowed core or a late
wake-up stalls the whole region, while TBB's workers steal work and stay awake between
back-to-back regions. numba's OpenMP layer stalled 3-10x under load here. pip's `tbb` puts
libtbb.so.12 in <prefix>/lib, off the loader's path, so it is preloaded from there.

numba leaves LLVM's SLP vectorizer off by default; conv's register-blocked micro-kernel needs it
(a fully unrolled 6x16 block becomes twelve AVX2 FMAs only through SLP: 4 -> 45 GFLOP/s per core
here), so it is switched on for this process unless the user set NUMBA_SLP_VECTORIZE. numba reads
the flag each time it optimises a module, so this holds for every kernel compiled after import.
"""

import ctypes
import hashlib
import os
import sys
import types

import numba


def _tbb_loads():
    """Whether numba's TBB layer can load (preloading pip's libtbb from <prefix>/lib if needed)."""
    for path in ("libtbb.so.12", os.path.join(sys.prefix, "lib", "libtbb.so.12")):
        try:
            version = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL).TBB_runtime_interface_version
            break
        except (OSError, AttributeError):
            continue
    else:
        return False
    version.restype = ctypes.c_int
    if version() < 12060:   # numba's own minimum (TBB 2021.6)
        return False
    try:
        from numba.np.ufunc import tbbpool  # noqa: F401
    except ImportError:
        return False
    return True


if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "tbb" if _tbb_loads() else "workqueue"
if "NUMBA_SLP_VECTORIZE" not in os.environ:
    numba.config.SLP_VECTORIZE = 1

PARALLEL_MIN = 1 << 16
# fastmath without "nnan"/"ninf": reassociation lets reductions vectorise, but NaN and inf must
# keep IEEE behaviour so a diverging loss reaches the caller as NaN (full fastmath makes it undefined)
FASTMATH = {"reassoc", "contract", "arcp", "nsz", "afn"}
OPTIONS = {"cache": True, "fastmath": FASTMATH, "nogil": True, "error_model": "numpy"}


def _compiled(fn, **extra):
    """njit a copy of `fn` whose name carries the options: numba's disk cache is keyed on the
    source file and the name, not the options, so this keeps twins apart and drops stale code
    when the options change."""
    options = dict(OPTIONS, **extra)
    canonical = sorted((k, sorted(v) if isinstance(v, set) else v) for k, v in options.items())  # sets: no fixed order
    canonical.append(("slp", numba.config.SLP_VECTORIZE))
    tag = hashlib.sha1(repr(canonical).encode()).hexdigest()[:8]
    twin = types.FunctionType(fn.__code__, fn.__globals__, f"{fn.__name__}_{tag}", fn.__defaults__, fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}_{tag}"
    return numba.njit(**options)(twin)


class Kernel:
    """A loop nest compiled serial and parallel; call with the work size first."""

    def __init__(self, fn):
        self.serial = _compiled(fn)
        self.parallel = _compiled(fn, parallel=True)
        self.__name__ = fn.__name__

    def __call__(self, size, *args):
        return (self.parallel if size >= PARALLEL_MIN else self.serial)(*args)


def kernel(fn):
    return Kernel(fn)


def helper(fn):
    """A function called from kernels: compiled into each caller (and cached with it)."""
    return numba.njit(**{k: v for k, v in OPTIONS.items() if k != "cache"})(fn)
