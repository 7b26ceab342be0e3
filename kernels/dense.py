"""dense (fully connected) forward and backward: BLAS GEMM plus the numba bias kernels.

The GEMMs go to numpy's BLAS outside njit: on these machines that was never slower than np.dot
inside njit, which links scipy's separate BLAS. The bias uses broadcast_add on (N, C), so the
dense layer's bias cost is the same kernel the conv layers use.
"""

import numpy as np

from ._checks import f32, out_buffer
from .bias import broadcast_add_backward, broadcast_add_forward


def _check(x, w):
    x, w = f32("x", x, 2), f32("w", w, 2)
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"x {x.shape} has {x.shape[1]} features but w {w.shape} (I, O) expects {w.shape[0]}")
    return x, w


def dense_forward(x, w, b, *, out=None):
    """y = x @ w + b, with x (N, I), w (I, O), b (O,)."""
    x, w = _check(x, w)
    b = f32("b", b, 1)
    if b.shape[0] != w.shape[1]:
        raise ValueError(f"b {b.shape} must have one entry per output of w {w.shape}")
    y = out_buffer(out, (x.shape[0], w.shape[1]))
    np.matmul(x, w, out=y)
    return broadcast_add_forward(y, b, layout="NHWC", out=y)


def dense_backward(x, w, dy, *, out=None):
    """(dx, dw, db) for y = dense_forward(x, w, b); `out` is an optional (dx, dw, db) triple."""
    x, w = _check(x, w)
    dy = f32("dy", dy, 2)
    if dy.shape != (x.shape[0], w.shape[1]):
        raise ValueError(f"dy has shape {dy.shape}, expected {(x.shape[0], w.shape[1])} for x {x.shape}, w {w.shape}")
    dx_out, dw_out, db_out = out if out is not None else (None, None, None)
    dx = np.matmul(dy, w.T, out=out_buffer(dx_out, x.shape, "out[0] (dx)"))
    dw = np.matmul(x.T, dy, out=out_buffer(dw_out, w.shape, "out[1] (dw)"))
    db = broadcast_add_backward(dy, layout="NHWC", out=db_out)
    return dx, dw, db
