"""Max-pooling with a square window and stride equal to the window (Keras' MaxPooling2D default).

Forward also returns the argmax of each window (0..size*size-1: int8 up to 11 x 11 windows, then
int16 or int32, maxpool2d_argmax_dtype), which backward routes dy through, so backward never
re-reads x; where it scatters (NCHW, windows other than 2 x 2) it first checks that every argmax
is a position of the window. Trailing rows/columns that do not fill a window are dropped (padding
"valid"), and get zero gradient. As in PyTorch, a NaN anywhere in a window makes its max NaN and
its argmax the window's last NaN (so backward routes the gradient there); among equal values the
first wins.

Size 2 (Keras' default, and both seed CNNs') has its own kernels: NHWC's forward unrolls the
window over a vector loop along the channels (8x faster than the general kernel, which keeps a
running max per window position); NCHW's forward and backward run each row of windows in vector
runs of 8 windows, or 4 in rows of 4-7 (_pool2_run, _unpool2_run; rows under 4 window by window),
splitting and interleaving the windows' even and odd columns in registers.
"""

import numpy as np
from llvmlite import ir
from numba import prange, types, uint64
from numba.core.errors import TypingError
from numba.extending import intrinsic

from ._checks import check_layout, f32, no_overlap, out_buffer, positive_int, shape4
from ._jit import helper, kernel
from ._tile import _inlined, operands, vector_at


@helper
def _wins(v, best):
    """Whether v replaces the running max: larger, or NaN (bitwise `|`: no branch, so the channel
    loops still vectorise)."""
    return (v > best) | (v != v)


@helper
def _step(v, q, best, at):
    """The running (max, argmax) after v at window position q, as selects (no branch)."""
    w = _wins(v, best)
    return (v if w else best), (q if w else at)


@kernel
def _pool_nchw(x, p, y, arg):
    """Each row of windows with plain comparisons, then again NaN-aware if it held a NaN (the
    NaN test in the first pass, as here in the second, made it 1.3-1.9x slower)."""
    n, c, oh_, ow_ = y.shape
    for r in prange(n * c):
        plane, out, idx = x[r // c, r % c], y[r // c, r % c], arg[r // c, r % c]
        for oh in range(oh_):
            total = np.float32(0.0)   # NaN if the row held one (or inf and -inf: a harmless recheck)
            for ow in range(ow_):
                best, at = plane[oh * p, ow * p], 0
                for i in range(p):
                    for j in range(p):
                        v = plane[oh * p + i, ow * p + j]
                        total += v
                        if v > best:
                            best, at = v, i * p + j
                out[oh, ow], idx[oh, ow] = best, at
            if total != total:
                for ow in range(ow_):
                    best, at = plane[oh * p, ow * p], 0
                    for i in range(p):
                        for j in range(p):
                            best, at = _step(plane[oh * p + i, ow * p + j], i * p + j, best, at)
                    out[oh, ow], idx[oh, ow] = best, at


def _run_width(lanes, name):
    """A run intrinsic's constant number of windows."""
    if not isinstance(lanes, types.IntegerLiteral):
        raise TypingError(f"{name} needs constant lanes")
    return lanes.literal_value


def _vectors(r):
    """The IR vector types of a run of r windows: a window row's 2r floats, r floats, r codes."""
    return ir.VectorType(ir.FloatType(), 2 * r), ir.VectorType(ir.FloatType(), r), ir.VectorType(ir.IntType(8), r)


@intrinsic
def _pool2_run(typingctx, x, x0, x1, y, yo, arg, lanes):
    """y[yo:yo+R] and arg[yo:yo+R] for R = lanes consecutive 2 x 2 windows over x[x0:x0+2R] and
    x[x1:x1+2R] (a window's two rows): two 2R-float loads split into even and odd columns, then
    _step's comparisons on R-float vectors. As a scalar loop LLVM left it scalar (the columns
    are interleaved)."""
    r = _run_width(lanes, "_pool2_run")

    def codegen(context, builder, signature, args):
        (xd, yd, ad), (x0_, x1_, yo_) = operands(context, builder, signature, args, (0, 3, 5), (1, 2, 4))
        pair, run, codes = _vectors(r)
        columns = [ir.Constant(ir.VectorType(ir.IntType(32), r), list(range(k, 2 * r, 2))) for k in (0, 1)]
        v = [builder.shuffle_vector(row, ir.Constant(pair, ir.Undefined), cols)
             for row in (builder.load(vector_at(builder, xd, x0_, pair), align=4),
                         builder.load(vector_at(builder, xd, x1_, pair), align=4)) for cols in columns]
        best, at = v[0], ir.Constant(codes, [0] * r)
        for q in (1, 2, 3):   # _wins: larger, or NaN
            wins = builder.or_(builder.fcmp_ordered(">", v[q], best), builder.fcmp_unordered("uno", v[q], v[q]))
            best, at = builder.select(wins, v[q], best), builder.select(wins, ir.Constant(codes, [q] * r), at)
        builder.store(best, vector_at(builder, yd, yo_, run), align=4)
        builder.store(at, vector_at(builder, ad, yo_, codes), align=1)
        return context.get_dummy_value()
    return types.none(x, x0, x1, y, yo, arg, lanes), codegen


@intrinsic
def _unpool2_run(typingctx, g, go, arg, dx, d0, d1, lanes):
    """dx[d0:d0+2R] and dx[d1:d1+2R] (the two rows of R = lanes consecutive 2 x 2 windows): each
    window's gradient g[go + i] at the position its code arg[go + i] names, zero at the others. The
    gradients and codes are repeated, each twice, to 2R lanes, and each row is one select against
    its positions' codes (0, 1, 0, 1, ... or 2, 3, 2, 3, ...): four selects on R lanes interleaved
    into the rows took 1.6-1.7x the time in runs of 4 on AVX-512 (docs/performance.md, session 29)."""
    r = _run_width(lanes, "_unpool2_run")

    def codegen(context, builder, signature, args):
        (gd, ad, dd), (go_, d0_, d1_) = operands(context, builder, signature, args, (0, 2, 3), (1, 4, 5))
        pair, run, codes = _vectors(r)
        twice = ir.Constant(ir.VectorType(ir.IntType(32), 2 * r), [k // 2 for k in range(2 * r)])
        grads = builder.load(vector_at(builder, gd, go_, run), align=4)
        grads = builder.shuffle_vector(grads, ir.Constant(run, ir.Undefined), twice)   # each window's twice
        at = builder.load(vector_at(builder, ad, go_, codes), align=1)
        at = builder.shuffle_vector(at, ir.Constant(codes, ir.Undefined), twice)
        zero = ir.Constant(pair, [0.0] * (2 * r))
        for i, row in ((0, d0_), (1, d1_)):
            here = ir.Constant(ir.VectorType(ir.IntType(8), 2 * r), [2 * i + k % 2 for k in range(2 * r)])
            builder.store(builder.select(builder.icmp_signed("==", at, here), grads, zero),
                          vector_at(builder, dd, row, pair), align=4)
        return context.get_dummy_value()
    return types.none(g, go, arg, dx, d0, d1, lanes), codegen


@helper
def _pool2_row(xf, x0, x1, yf, af, o, ow_):
    """One row of ow_ windows (x's rows at x0 and x1, y's and arg's at o): in runs of 8 windows,
    or 4 in rows under 8, the last run overlapping the one before (it writes those again, alike);
    rows under 4 window by window."""
    _inlined()
    if ow_ >= 8:
        for ow0 in range(0, ow_, 8):
            ow = min(ow0, ow_ - 8)
            _pool2_run(xf, uint64(x0 + 2 * ow), uint64(x1 + 2 * ow), yf, uint64(o + ow), af, 8)
        return
    if ow_ >= 4:
        for ow0 in range(0, ow_, 4):
            ow = min(ow0, ow_ - 4)
            _pool2_run(xf, uint64(x0 + 2 * ow), uint64(x1 + 2 * ow), yf, uint64(o + ow), af, 4)
        return
    for ow in range(ow_):
        best, at = _step(xf[uint64(x0 + 2 * ow + 1)], 1, xf[uint64(x0 + 2 * ow)], 0)
        best, at = _step(xf[uint64(x1 + 2 * ow)], 2, best, at)
        yf[uint64(o + ow)], af[uint64(o + ow)] = _step(xf[uint64(x1 + 2 * ow + 1)], 3, best, at)


@helper
def _unpool2_row(gf, af, o, df, d0, d1, ow_):
    """dx's two rows (at d0 and d1) under one row of ow_ windows (dy's and arg's at o), in runs as
    _pool2_row's: a loop per run width (the width chosen inside one loop made cifar's 6-window rows
    1.09x slower)."""
    _inlined()
    if ow_ >= 8:
        for ow0 in range(0, ow_, 8):
            ow = min(ow0, ow_ - 8)
            _unpool2_run(gf, uint64(o + ow), af, df, uint64(d0 + 2 * ow), uint64(d1 + 2 * ow), 8)
        return
    if ow_ >= 4:
        for ow0 in range(0, ow_, 4):
            ow = min(ow0, ow_ - 4)
            _unpool2_run(gf, uint64(o + ow), af, df, uint64(d0 + 2 * ow), uint64(d1 + 2 * ow), 4)
        return
    for ow in range(ow_):
        v, a = gf[uint64(o + ow)], af[uint64(o + ow)]
        for k in range(4):
            df[uint64((d0 if k < 2 else d1) + 2 * ow + k % 2)] = v if a == k else 0.0


@kernel
def _pool2_nchw(x, y, arg):
    """Size 2: each plane's rows of windows in vector runs (_pool2_row), NaN-aware in one pass
    (docs/performance.md, session 29)."""
    n, c, oh_, ow_ = y.shape
    h, w = x.shape[2], x.shape[3]
    xf, yf, af = x.reshape(-1), y.reshape(-1), arg.reshape(-1)
    for r in prange(n * c):
        xb, yb = r * h * w, r * oh_ * ow_
        for oh in range(oh_):
            _pool2_row(xf, xb + 2 * oh * w, xb + (2 * oh + 1) * w, yf, af, yb + oh * ow_, ow_)


@kernel
def _pool2_nhwc(x, y, arg):
    n, oh_, ow_, c = y.shape
    for r in prange(n * oh_):
        b, oh = r // oh_, r % oh_
        x0, x1, yr, ar = x[b, 2 * oh], x[b, 2 * oh + 1], y[b, oh], arg[b, oh]
        for ow in range(ow_):
            v0, v1, v2, v3, yo, ao = x0[2 * ow], x0[2 * ow + 1], x1[2 * ow], x1[2 * ow + 1], yr[ow], ar[ow]
            for k in range(c):
                best, at = _step(v1[k], 1, v0[k], 0)
                best, at = _step(v2[k], 2, best, at)
                best, at = _step(v3[k], 3, best, at)
                yo[k], ao[k] = best, at


@kernel
def _pool_nhwc(x, p, y, arg):
    """Channels innermost, running max and argmax in per-row scratch: with y's own rows as the
    accumulators (or an int8 argmax) LLVM did not vectorise the channel loop, 3.4x slower here."""
    n, oh_, ow_, c = y.shape
    for r in prange(n * oh_):
        b, oh = r // oh_, r % oh_
        best, at = np.empty(c, np.float32), np.empty(c, np.int32)
        for ow in range(ow_):
            first = x[b, oh * p, ow * p]
            for k in range(c):   # loops, not slice assignments: see _copies.copy
                best[k], at[k] = first[k], 0
            for i in range(p):
                for j in range(p):
                    v, q = x[b, oh * p + i, ow * p + j], i * p + j
                    for k in range(c):
                        better = _wins(v[k], best[k])
                        best[k] = v[k] if better else best[k]
                        at[k] = q if better else at[k]
            yo, ao = y[b, oh, ow], arg[b, oh, ow]
            for k in range(c):
                yo[k], ao[k] = best[k], at[k]


@kernel
def _unpool_nchw(dy, arg, p, dx):
    n, c, oh_, ow_ = dy.shape
    for r in prange(n * c):
        plane, g, idx = dx[r // c, r % c], dy[r // c, r % c], arg[r // c, r % c]
        plane[:] = 0.0
        for oh in range(oh_):
            for ow in range(ow_):
                a = idx[oh, ow]
                plane[oh * p + a // p, ow * p + a % p] = g[oh, ow]


@kernel
def _unpool2_nchw(dy, arg, dx):
    """Size 2: dx's rows in pairs (_unpool2_row); a plane with an unpooled last row or column is
    zeroed first (zeroing only those took 1.3x the time on cifar's 13 x 13 planes)."""
    n, c, oh_, ow_ = dy.shape
    h, w = dx.shape[2], dx.shape[3]
    gf, af, df = dy.reshape(-1), arg.reshape(-1), dx.reshape(-1)
    ragged = h > 2 * oh_ or w > 2 * ow_
    for r in prange(n * c):
        db, gb = r * h * w, r * oh_ * ow_
        if ragged:
            for k in range(h * w):
                df[uint64(db + k)] = 0.0
        for oh in range(oh_):
            _unpool2_row(gf, af, gb + oh * ow_, df, db + 2 * oh * w, db + (2 * oh + 1) * w, ow_)


@kernel
def _unpool_nhwc(dy, arg, p, dx):
    """Every dx element written once, as a select along the channels (a vector loop): 3.7x faster
    here than zeroing dx and then scattering each channel's gradient."""
    n, oh_, ow_, c = dy.shape
    h = dx.shape[1]
    for r in prange(n * oh_):
        b, oh = r // oh_, r % oh_
        for i in range(p):
            row = dx[b, oh * p + i]
            for ow in range(ow_):
                g, idx = dy[b, oh, ow], arg[b, oh, ow]
                for j in range(p):
                    d, q = row[ow * p + j], i * p + j
                    for k in range(c):
                        d[k] = g[k] if idx[k] == q else 0.0
            row[ow_ * p:] = 0.0
        if oh == oh_ - 1:
            for ih in range(oh_ * p, h):
                dx[b, ih] = 0.0


def _pooled_shape(shape, layout, size):
    """The pooled shape of `shape`, for a size checked by positive_int."""
    n, c, h, w = shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
    if h < size or w < size:
        raise ValueError(f"pool window {size}x{size} is larger than the input {h}x{w} ({layout}, shape {shape})")
    oh, ow = h // size, w // size
    return (n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c)


def maxpool2d_argmax_dtype(size):
    """The dtype of the argmax of size x size windows: the narrowest signed integer that holds
    their size*size positions (int8 up to 11 x 11)."""
    size = positive_int("pool size", size, 15)
    return np.dtype(next(t for t in (np.int8, np.int16, np.int32) if size * size <= np.iinfo(t).max + 1))


def maxpool2d_forward(x, *, layout, size=2, out=None, argmax_out=None):
    """(y, argmax): the max of each size x size window (NaN if the window holds one, as in PyTorch),
    and its position in the window, in maxpool2d_argmax_dtype(size)."""
    check_layout(layout)
    x = f32("x", x, 4)
    size = positive_int("pool size", size, 15)
    shape = _pooled_shape(x.shape, layout, size)
    y = out_buffer(out, shape)
    arg = out_buffer(argmax_out, shape, "argmax_out", maxpool2d_argmax_dtype(size))
    no_overlap("out", y, {"x": x, "argmax_out": arg})
    no_overlap("argmax_out", arg, {"x": x})
    if size == 2:
        (_pool2_nchw if layout == "NCHW" else _pool2_nhwc)(x.size, x, y, arg)
    else:
        (_pool_nchw if layout == "NCHW" else _pool_nhwc)(x.size, x, size, y, arg)
    return y, arg


def maxpool2d_backward(dy, argmax, x_shape, *, layout, size=2, out=None):
    """dx: dy routed to the argmax of each window, zero elsewhere."""
    check_layout(layout)
    dy = f32("dy", dy, 4)
    x_shape = shape4("x_shape", x_shape, f"the 4-D shape of the forward's x ({layout})")
    size = positive_int("pool size", size, 15)
    shape = _pooled_shape(x_shape, layout, size)
    dtype = maxpool2d_argmax_dtype(size)
    if not isinstance(argmax, np.ndarray) or argmax.dtype != dtype:
        raise TypeError(f"argmax must be the {dtype} array maxpool2d_forward returned for size {size}, got "
                        f"{getattr(argmax, 'dtype', type(argmax).__name__)}")
    if dy.shape != shape or argmax.shape != shape:
        raise ValueError(f"dy {dy.shape} and argmax {argmax.shape} must both be {shape} for x {x_shape}")
    argmax = np.ascontiguousarray(argmax)
    # the general NCHW kernel scatters through the argmax, so a position off the window would write
    # outside dx: one pass over it first (seen unsigned, a negative is past every position); the
    # others select by position, and one off the window routes nothing
    scatters = layout == "NCHW" and size != 2
    if scatters and argmax.view(np.dtype(f"u{dtype.itemsize}")).max() >= size * size:
        raise ValueError(f"argmax holds positions outside a {size}x{size} window (0..{size * size - 1}): pass the "
                         f"argmax maxpool2d_forward returned for this x and size")
    dx = out_buffer(out, x_shape)
    no_overlap("out", dx, {"dy": dy, "argmax": argmax})
    if size == 2 and layout == "NCHW":
        _unpool2_nchw(dx.size, dy, argmax, dx)
    else:
        (_unpool_nchw if layout == "NCHW" else _unpool_nhwc)(dx.size, dy, argmax, size, dx)
    return dx
