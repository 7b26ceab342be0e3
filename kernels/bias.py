"""broadcast_add: the per-channel bias, forward and backward, in both layouts.

Both layouts reduce to one of two shapes, so each direction is two loop nests:
  channels-outer (NCHW): x viewed as (N, C, HW), the bias constant along each (i, c) row; the
  forward runs parallel over the images (over the N*C rows, each finding its channel as r % C,
  it ran 1.13-1.35x slower: docs/performance.md);
  channels-inner (NHWC and 2-D (N, C)): x viewed as (R, C), the bias is a row added to every row.
The backward reductions accumulate blocks of rows in float32 (vectorised) and blocks into float64,
so a sum over ~10^5 values keeps float32 accuracy. The channels-inner one sums 64 columns at a time
in registers, over rows widened to a multiple of 64 floats when C is smaller (C = 32: rows of 64,
two pixels each), so every load is a whole vector and the accumulators never go to memory.
"""

import numpy as np
from llvmlite import ir
from numba import prange, types, uint64
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._checks import channel_axis, check_layout, f32, no_overlap, out_buffer
from ._jit import helper, kernel
from ._tile import _block, operands, vector_at

_ROW_BLOCK = 256   # rows summed in float32 before their sums join the float64 total
_WIDEST = 1024   # the longest row a channel count under 64 is widened to (_width)
W = None   # the columns a _column_sums run holds: each helper compiles with its own in place


@kernel
def _add_outer(x, b, y):
    n, c, hw = x.shape
    for i in prange(n):
        for ch in range(c):
            bias, xr, yr = b[ch], x[i, ch], y[i, ch]
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
    """In place. A separate loop nest, because y aliasing x defeats the vectorised one above; over
    the N*C rows, which ran up to 1.35x faster here than over the images (not so out of place)."""
    n, c, hw = y.shape
    rows = y.reshape(n * c, hw)
    for r in prange(n * c):
        yr, bias = rows[r], b[r % c]
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
    """Parallel over the N*C rows, each summed in float32, the sums of each channel in float64."""
    n, c, hw = dy.shape
    rows = dy.reshape(n * c, hw)
    partial = np.empty(n * c, np.float64)
    for r in prange(n * c):
        row = rows[r]
        acc = np.float32(0.0)
        for k in range(hw):
            acc += row[k]
        partial[r] = acc
    for ch in range(c):
        total = 0.0
        for r in range(ch, n * c, c):
            total += partial[r]
        db[ch] = total


@intrinsic
def _add_run(typingctx, acc, a, ao, lanes):
    """acc[:lanes] += a[ao:ao + lanes]: one vector load and add, written as vector IR because LLVM
    vectorised the loop it replaces across the rows instead, with gathers (5-10x slower)."""
    if not isinstance(lanes, types.IntegerLiteral):
        raise TypingError("_add_run needs constant lanes")
    vec = ir.VectorType(ir.FloatType(), lanes.literal_value)

    def codegen(context, builder, signature, args):
        (data,), (ao_,) = operands(context, builder, signature, args, (1,), (2,))
        run = builder.load(vector_at(builder, data, ao_, vec), align=4)
        slot = vector_at(builder, args[0], 0, vec)
        builder.store(builder.fadd(builder.load(slot, align=4), run), slot, align=4)
        return context.get_dummy_value()
    return types.none(acc, a, ao, lanes), codegen


def _column_sums(f, width, lo, hi, k0, partial, blk):
    """partial[blk, k0:k0 + W] = the sums of columns k0 .. k0 + W - 1 over rows lo..hi of f seen as
    rows `width` long, the W sums held in registers."""
    acc = _block(W)
    for r in range(lo, hi):
        _add_run(acc, f, uint64(r * width + k0), W)
    for j in range(W):
        partial[blk, k0 + j] = acc[j]


_sums_64 = helper(_column_sums, {"W": 64})
_sums_16 = helper(_column_sums, {"W": 16})


@helper
def _width(c):
    """The row length the channels-inner reduction sums over: c from 64 channels on; below, the
    first multiple of 64 that c divides, up to _WIDEST (C = 32: rows of two pixels), so short rows
    still fill the 64-column runs; else c itself (17 <= c < 64: the 16-column runs still fit)."""
    if c >= 64:
        return c
    width = 64
    while width % c:
        width += 64
    return width if width <= _WIDEST else c


@kernel
def _sum_inner(dy, db):
    """db = the column sums of (R, C) dy, over dy's floats seen as rows _width(C) long: blocks of
    rows summed 64 columns at a time in registers, then 16 at a time (the last 16 overlapping the
    run before, so a few columns are summed twice alike, when the width is no multiple of 16); the
    rows of C left over at the end added last."""
    c = db.shape[0]
    width = _width(c)
    f = dy.ravel()
    rows = f.size // width
    blocks = (rows + _ROW_BLOCK - 1) // _ROW_BLOCK
    partial = np.empty((blocks, width), np.float64)
    for blk in prange(blocks):
        lo, hi = blk * _ROW_BLOCK, min(rows, (blk + 1) * _ROW_BLOCK)
        k0 = 0
        while k0 + 64 <= width:
            _sums_64(f, width, lo, hi, k0, partial, blk)
            k0 += 64
        while k0 < width:
            _sums_16(f, width, lo, hi, min(k0, width - 16), partial, blk)
            k0 += 16
    for k in range(c):
        total = 0.0
        for blk in range(blocks):
            for m in range(k, width, c):
                total += partial[blk, m]
        for r in range(rows * width // c, dy.shape[0]):
            total += dy[r, k]
        db[k] = total


def _views(a, layout):
    """(kind, view) of a 2-D or 4-D array for the loop nests above: (N, C, HW) or (R, C)."""
    if a.ndim == 4 and layout == "NCHW":
        n, c, h, w = a.shape
        return "outer", a.reshape(n, c, h * w)
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
