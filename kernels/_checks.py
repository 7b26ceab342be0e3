"""Argument checks that run before any numba code, so bad input gets a plain error.

Policy: kernels compute in float32 only. Any other dtype is a TypeError rather than a silent
cast, because a silent cast is a hidden per-step copy, which is exactly what a profiler must not
hide. Non-contiguous float32 inputs are accepted and copied to C order.
"""

import numpy as np

LAYOUTS = ("NCHW", "NHWC")


def check_layout(layout):
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be 'NCHW' (channels_first) or 'NHWC' (channels_last), got {layout!r}")
    return layout


_F32 = np.dtype(np.float32)


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


def out_buffer(out, shape, name="out"):
    """Allocate the result, or check a caller's buffer (which must be exactly right: no copies)."""
    if out is None:
        return np.empty(shape, np.float32)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != tuple(shape) \
            or not out.flags.c_contiguous:
        got = f"{getattr(out, 'dtype', type(out).__name__)} {getattr(out, 'shape', '')}"
        raise ValueError(f"{name} must be a C-contiguous float32 array of shape {tuple(shape)}, got {got}")
    return out


def channel_axis(layout, ndim):
    """The channel axis of an (N, C) or 4-D array in `layout`."""
    return 1 if ndim == 2 or layout == "NCHW" else 3


def same_shape(name_a, a, name_b, b):
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must have the same shape, got {a.shape} and {b.shape}")
