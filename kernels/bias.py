"""broadcast_add: the per-channel bias, forward and backward, in both layouts.

Both layouts reduce to one of two shapes, so each direction is two loop nests:
  channels-outer (NCHW): x viewed as (N*C, HW) rows, row r of channel r % C, the bias constant
  along each row (rows of a 3-D (N, C, HW) view, found by r // C and r % C, are slower:
  docs/performance.md);
  channels-inner (NHWC and 2-D (N, C)): x viewed as (R, C), the bias is a row added to every row.
The backward reductions accumulate blocks in float32 (vectorised) and blocks into float64, so a sum
over ~10^5 values keeps float32 accuracy.
"""

import numpy as np
from numba import prange

from ._checks import channel_axis, check_layout, f32, no_overlap, out_buffer
from ._jit import kernel

_ROW_BLOCK = 256


@kernel
def _add_outer(x, b, y):
    rows, hw = x.shape
    c = b.shape[0]
    for r in prange(rows):
        bias = b[r % c]
        xr, yr = x[r], y[r]
        for k in range(hw):
            yr[k] = xr[k] + bias


@kernel
def _add_inner(x, b, y):
    rows, c = x.shape
    for r in prange(rows):
        xr, yr = x[r], y[r]
        for k in range(c):
            yr[k] = xr[k] + b[k]


@kernel
def _iadd_outer(y, b):
    """In place. A separate loop nest, because y aliasing x defeats the vectorised one above."""
    rows, hw = y.shape
    c = b.shape[0]
    for r in prange(rows):
        yr, bias = y[r], b[r % c]
        for k in range(hw):
            yr[k] += bias


@kernel
def _iadd_inner(y, b):
    rows, c = y.shape
    for r in prange(rows):
        yr = y[r]
        for k in range(c):
            yr[k] += b[k]


@kernel
def _sum_outer(dy, db):
    rows, hw = dy.shape
    c = db.shape[0]
    partial = np.empty(rows, np.float64)
    for r in prange(rows):
        row = dy[r]
        acc = np.float32(0.0)
        for k in range(hw):
            acc += row[k]
        partial[r] = acc
    for ch in range(c):
        total = 0.0
        for r in range(ch, rows, c):
            total += partial[r]
        db[ch] = total


@kernel
def _sum_inner(dy, db):
    rows, c = dy.shape
    blocks = (rows + _ROW_BLOCK - 1) // _ROW_BLOCK
    partial = np.zeros((blocks, c), np.float64)
    for blk in prange(blocks):
        acc = np.zeros(c, np.float32)
        for r in range(blk * _ROW_BLOCK, min(rows, (blk + 1) * _ROW_BLOCK)):
            row = dy[r]
            for k in range(c):
                acc[k] += row[k]
        for k in range(c):
            partial[blk, k] = acc[k]
    for k in range(c):
        total = 0.0
        for blk in range(blocks):
            total += partial[blk, k]
        db[k] = total


def _views(a, layout):
    """(kind, 2-D view) of a 2-D or 4-D array for the loop nests above."""
    if a.ndim == 4 and layout == "NCHW":
        n, c, h, w = a.shape
        return "outer", a.reshape(n * c, h * w)
    return "inner", a.reshape(-1, a.shape[-1])


def broadcast_add_forward(x, b, *, layout, out=None):
    """y = x + b along the channel axis of x ((N, C), NCHW or NHWC). `out` may be `x` (in place)."""
    check_layout(layout)
    x = f32("x", x, (2, 4))
    b = f32("b", b, 1)
    channels = x.shape[channel_axis(layout, x.ndim)]
    if b.shape[0] != channels:
        raise ValueError(f"b has {b.shape[0]} channels but x {x.shape} in {layout} has {channels}")
    y = out_buffer(out, x.shape)
    no_overlap("out", y, {"x": x, "b": b}, in_place=("x",))
    kind, xv = _views(x, layout)
    if y is x:
        (_iadd_outer if kind == "outer" else _iadd_inner)(x.size, xv, b)
    else:
        (_add_outer if kind == "outer" else _add_inner)(x.size, xv, b, y.reshape(xv.shape))
    return y


def broadcast_add_backward(dy, *, layout, out=None):
    """db = dy summed over every axis but the channel axis."""
    check_layout(layout)
    dy = f32("dy", dy, (2, 4))
    db = out_buffer(out, (dy.shape[channel_axis(layout, dy.ndim)],))
    no_overlap("out", db, {"dy": dy})
    kind, dyv = _views(dy, layout)
    (_sum_outer if kind == "outer" else _sum_inner)(dy.size, dyv, db)
    return db
