"""Argument checks that run before any numba code, so bad input gets one plain error line that
names the argument, what was expected and what was given.

Policy: kernels compute in float32 only. Any other dtype is a TypeError rather than a silent
cast, because a silent cast is a hidden per-step copy, which is exactly what a profiler must not
hide. Non-contiguous float32 inputs are accepted and copied to C order. Buffers a kernel writes
(`out=`, optimizer parameters and slots) must be writeable, C-contiguous float32 of the exact
shape, and must not overlap the arrays the kernel reads: an overlap is a ValueError naming both,
except where a kernel documents that it computes in place (out=x itself, element by element).
"""

import numbers

import numpy as np

from .workspace import Workspace, aligned_empty

LAYOUTS = ("NCHW", "NHWC")


def check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'NCHW' (channels_first) or 'NHWC' (channels_last), got {layout!r}")
    return layout


_F32 = np.dtype(np.float32)


def _given(a):
    return f"{type(a).__name__} {a!r}" if np.ndim(a) == 0 and not isinstance(a, np.ndarray) else type(a).__name__


def f32(name, a, ndim=None):
    """Return `a` as a C-contiguous float32 array, or raise naming `name`. On the hot path of every
    kernel call, so the common case is a handful of attribute checks."""
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(a).__name__}")
    if a.dtype != _F32:
        raise TypeError(f"{name} must be float32, got {a.dtype} (cast it once with .astype(np.float32))")
    if ndim is not None and a.ndim != ndim and not (isinstance(ndim, tuple) and a.ndim in ndim):
        want = " or ".join(f"{d}-D" for d in (ndim if isinstance(ndim, tuple) else (ndim,)))
        raise ValueError(f"{name} must be {want}, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name} is empty (shape {a.shape})")
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def positive_int(name, value, bits):
    """`value` as a Python int from 1 to 2**bits - 1, or the one-line error naming `name`: numpy's
    narrow integers would overflow in the callers' arithmetic, and huge ones in numba's."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or not 1 <= value < 2**bits:
        raise ValueError(f"{name} must be a positive int (below 2**{bits}), got {value!r}")
    return int(value)


def shape4(name, shape, what):
    """`shape` as a tuple of 4 positive Python ints, or the one-line error naming `name`."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or len(dims) != 4 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                  and d > 0 for d in dims):
        raise ValueError(f"{name} must be {what} (4 positive ints), got {shape!r}")
    return tuple(int(d) for d in dims)


def writeable(name, a):
    if not a.flags.writeable:
        raise ValueError(f"{name} is read-only (flags.writeable is False), but the kernel writes into it; "
                         f"pass a writeable array")
    return a


def out_buffer(out, shape, name="out", dtype=_F32):
    """Allocate the result (on a cache line), or check a caller's buffer (which must be exactly
    right: no copies)."""
    if out is None:
        return aligned_empty(shape, dtype)
    if not isinstance(out, np.ndarray) or out.dtype != dtype or out.shape != tuple(shape) \
            or not out.flags.c_contiguous:
        got = f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}".strip()
        if isinstance(out, np.ndarray) and out.dtype == dtype and out.shape == tuple(shape):
            got += " (not C-contiguous)"
        raise ValueError(f"{name} must be a C-contiguous {np.dtype(dtype)} array of shape {tuple(shape)}, got {got}")
    return writeable(name, out)


def _same_view(a, b):
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape \
        and a.strides == b.strides


def no_overlap(out_name, out, inputs, in_place=()):
    """Raise if `out` overlaps any of `inputs` ({name: array}); those named in `in_place` may also
    be `out` itself (a kernel that reads and writes each element at the same index)."""
    for name, a in inputs.items():
        if a is None or not np.may_share_memory(out, a):
            continue
        if name in in_place and (out is a or _same_view(out, a)):
            continue
        allowed = f" (it may be {name} itself, for an in-place update)" if name in in_place else ""
        raise ValueError(f"{out_name} overlaps {name} in memory, and the kernel would overwrite {name} while "
                         f"reading it: pass a separate buffer{allowed}")


def flag(name, v):
    """A bool (numpy's too) as a Python bool: a string or None would read as true or false unnoticed."""
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {_given(v)}")
    return bool(v)


def number(name, v):
    """A real number as a Python float (numba types those faster than numpy scalars)."""
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{name} must be a real number (int or float), got {_given(v)}")
    return float(v)


def check_workspace(ws):
    if ws is None:
        return Workspace()
    if not isinstance(ws, Workspace):
        raise TypeError(f"workspace must be a kernels.Workspace or None, got {_given(ws)}")
    return ws


def channel_axis(layout, ndim):
    """The channel axis of an (N, C) or 4-D array in `layout`."""
    return 1 if ndim == 2 or layout == "NCHW" else 3


def same_shape(name_a, a, name_b, b):
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {a.shape} and {b.shape}")
