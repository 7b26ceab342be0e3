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
libtbb.so.12 in <prefix>/lib, off the loader's path, so it is preloaded from there whenever the
layer may be TBB: the default, or a layer the user names that numba may resolve to TBB. numba
picks the layer once, when its pool starts: a pool started before this import (numba.set_num_threads
first) keeps numba's default, OpenMP where libtbb is off the loader's path, and the import warns.

On AVX-512 hosts the kernels compile for 512-bit vectors: LLVM's Intel server CPU models
(skylake-avx512 to emeraldrapids) prefer 256-bit ones, so numba's code used only ymm registers there
(the 6 x 16 block as twelve ymm FMAs) unless `-prefer-256-bit` is added to the host's feature
list. That has to happen before numba creates its code generator (the first @njit anywhere in
the process); if it already exists, or the user set NUMBA_CPU_FEATURES, the features stay as they
are and the block falls back to AVX2's 6 x 16 unless PROFILER_KERNEL_BLOCK says otherwise
(kernels/_isa.py).

numba leaves LLVM's SLP vectorizer off by default; the kernels were tuned and are measured with it
on, so it is switched on for this process unless the user set NUMBA_SLP_VECTORIZE (it first made
conv's 8 x 8 layout transposes vector code; they, and the micro-kernel's FMAs, are now written as
vector IR: kernels/_copies.py, kernels/_tile.py). numba reads the flag each time it optimises a
module, so this holds for every kernel compiled after import.
"""

import ctypes
import hashlib
import os
import sys
import types
import warnings
from pathlib import Path

import numba
from numba.core.registry import cpu_target

from . import _isa


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


def _launched_layer():
    """The layer numba's thread pool already runs on, or None if it has not started: numba picks
    the layer once, when the pool starts (numba.set_num_threads or the first parallel call)."""
    try:
        return numba.threading_layer()
    except ValueError:   # "Threading layer is not initialized."
        return None


def _warn_if_launched(chosen):
    """A pool started before this import keeps numba's own default layer (OpenMP where pip's
    libtbb is not on the loader's path): say so, once, since OpenMP is not fork safe."""
    running = _launched_layer()
    if running in (None, chosen):
        return
    risk = " (GNU OpenMP: a forked child that runs a parallel kernel is terminated)" if running == "omp" else ""
    warnings.warn(f"numba's thread pool started before the kernels loaded and runs on its {running!r} "
                  f"threading layer, not {chosen!r}{risk}; read kernels.BLOCK (or call any kernel) before "
                  f"numba.set_num_threads or other parallel numba code, or choose a layer with "
                  f"NUMBA_THREADING_LAYER",
                  RuntimeWarning, stacklevel=2)


# the user's choice: NUMBA_THREADING_LAYER, or numba.config.THREADING_LAYER set before this import
_LAYER = None if numba.config.THREADING_LAYER == "default" else numba.config.THREADING_LAYER
# every layer name but these two may pick TBB (numba's "default", "safe", "threadsafe", "forksafe"
# try it first), and numba finds pip's libtbb only once it is preloaded
_TBB = _LAYER not in ("omp", "workqueue") and _tbb_loads()
if _LAYER is None:
    numba.config.THREADING_LAYER = "tbb" if _TBB else "workqueue"
    _warn_if_launched(numba.config.THREADING_LAYER)
if "NUMBA_SLP_VECTORIZE" not in os.environ:
    numba.config.SLP_VECTORIZE = 1


def _wide_vectors():
    """Let LLVM use 512-bit vectors on an AVX-512 host (see above); whether the code will."""
    if _isa.isa_info()["isa"] != "avx512":
        return False
    if "NUMBA_CPU_FEATURES" in os.environ:
        return "-prefer-256-bit" in os.environ["NUMBA_CPU_FEATURES"]
    if numba.config.CPU_FEATURES is None and "_toplevel_target_context" not in vars(cpu_target):
        numba.config.CPU_FEATURES = _isa.host_features() + ",-prefer-256-bit"
    return "-prefer-256-bit" in (numba.config.CPU_FEATURES or "")


if not _wide_vectors():
    _isa.narrow()

PARALLEL_MIN = 1 << 16
# numba's disk cache checks the source file of the function it compiled, not of the helpers compiled
# into it from other files (_tile's micro-kernel, _copies' copies): every kernel's name carries a
# digest of all the kernels' sources, so an edit anywhere (or an upgrade that left old cache files
# beside the new sources) recompiles them rather than running stale code
SOURCES = hashlib.sha1(b"".join(p.read_bytes() for p in sorted(Path(__file__).parent.glob("*.py")))).hexdigest()[:8]
# fastmath without "nnan"/"ninf": reassociation lets reductions vectorise, but NaN and inf must
# keep IEEE behaviour so a diverging loss reaches the caller as NaN (full fastmath makes it undefined)
FASTMATH = {"reassoc", "contract", "arcp", "nsz", "afn"}
OPTIONS = {"cache": True, "fastmath": FASTMATH, "nogil": True, "error_model": "numpy"}


def _compiled(fn, env=None, key="", **extra):
    """njit a copy of `fn` with the globals in `env` replaced (e.g. a block shape, named by `key`),
    whose name carries the options, the key and SOURCES: numba's disk cache is keyed on the source
    file and the name, not the options or the globals, so this keeps twins and block shapes apart
    and drops stale code when the options or any kernel source change."""
    options = dict(OPTIONS, **extra)
    canonical = sorted((k, sorted(v) if isinstance(v, set) else v) for k, v in options.items())  # sets: no fixed order
    canonical += [("slp", numba.config.SLP_VECTORIZE), ("key", key), ("sources", SOURCES)]
    tag = hashlib.sha1(repr(canonical).encode()).hexdigest()[:8]
    scope = dict(fn.__globals__, **env) if env else fn.__globals__
    twin = types.FunctionType(fn.__code__, scope, f"{fn.__name__}_{tag}", fn.__defaults__, fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}_{tag}"
    twin.__module__ = fn.__module__
    return numba.njit(**options)(twin)


class Kernel:
    """A loop nest compiled serial and parallel (each on its first call); call with the work size
    first."""

    def __init__(self, fn, env=None, key=""):
        self.serial = _compiled(fn, env, key)
        self.parallel = _compiled(fn, env, key, parallel=True)
        self.__name__ = fn.__name__

    def __call__(self, size, *args):
        return (self.parallel if size >= PARALLEL_MIN else self.serial)(*args)


def kernel(fn):
    return Kernel(fn)


def helper(fn, env=None):
    """A function called from kernels: compiled into each caller (and cached with it)."""
    if env:
        fn = types.FunctionType(fn.__code__, dict(fn.__globals__, **env), fn.__name__, fn.__defaults__, fn.__closure__)
    return numba.njit(**{k: v for k, v in OPTIONS.items() if k != "cache"})(fn)
