"""Max-pooling with a square window and stride equal to the window (Keras' MaxPooling2D default).

Forward also returns the argmax of each window (0..size*size-1, int8), which backward scatters
through, so backward never re-reads x. Trailing rows/columns that do not fill a window are dropped
(padding "valid"), and get zero gradient. As in PyTorch, a NaN anywhere in a window makes its max
NaN and its argmax the window's last NaN (so backward routes the gradient there); among equal
values the first wins.

Size 2 (Keras' default, and both seed CNNs') has its own forward kernels, and an NCHW backward:
with the window unrolled the channel (NHWC) or column (NCHW) loop is one vector pass, 8x (NHWC)
and 2.4x (NCHW) faster than the general kernels, which keep a running max per window position.
"""

import numpy as np
from numba import prange

from ._checks import check_layout, f32, no_overlap, out_buffer
from ._jit import helper, kernel


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


@kernel
def _pool2_nchw(x, y, arg):
    """As _pool_nchw, the window unrolled."""
    n, c, oh_, ow_ = y.shape
    for r in prange(n * c):
        plane, out, idx = x[r // c, r % c], y[r // c, r % c], arg[r // c, r % c]
        for oh in range(oh_):
            x0, x1, yo, ao = plane[2 * oh], plane[2 * oh + 1], out[oh], idx[oh]
            total = np.float32(0.0)
            for ow in range(ow_):
                v0, v1, v2, v3 = x0[2 * ow], x0[2 * ow + 1], x1[2 * ow], x1[2 * ow + 1]
                total += (v0 + v1) + (v2 + v3)
                best, at = v0, 0
                if v1 > best:
                    best, at = v1, 1
                if v2 > best:
                    best, at = v2, 2
                if v3 > best:
                    best, at = v3, 3
                yo[ow], ao[ow] = best, at
            if total != total:
                for ow in range(ow_):
                    best, at = _step(x0[2 * ow + 1], 1, x0[2 * ow], 0)
                    best, at = _step(x1[2 * ow], 2, best, at)
                    yo[ow], ao[ow] = _step(x1[2 * ow + 1], 3, best, at)


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
    """Size 2, one row of dx at a time, each element written once: 2.2x faster here than
    zeroing and scattering on cifar10-cnn's and mnist-cnn's first pools."""
    n, c, oh_, ow_ = dy.shape
    for r in prange(n * c):
        plane, g, idx = dx[r // c, r % c], dy[r // c, r % c], arg[r // c, r % c]
        for oh in range(oh_):
            go, io = g[oh], idx[oh]
            for i in range(2):
                row = plane[2 * oh + i]
                for ow in range(ow_):
                    v, a = go[ow], io[ow]
                    row[2 * ow] = v if a == 2 * i else 0.0
                    row[2 * ow + 1] = v if a == 2 * i + 1 else 0.0
                row[2 * ow_:] = 0.0
        plane[2 * oh_:] = 0.0


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
    if not isinstance(size, (int, np.integer)) or isinstance(size, bool) or size < 1:
        raise ValueError(f"pool size must be a positive int, got {size!r}")
    n, c, h, w = shape if layout == "NCHW" else (shape[0], shape[3], shape[1], shape[2])
    if h < size or w < size:
        raise ValueError(f"pool window {size}x{size} is larger than the input {h}x{w} ({layout}, shape {shape})")
    oh, ow = h // size, w // size
    return (n, c, oh, ow) if layout == "NCHW" else (n, oh, ow, c)


def _x_shape(x_shape, layout):
    """x_shape as a tuple of 4 positive ints (the shape of maxpool2d_forward's x)."""
    try:
        shape = tuple(x_shape)
    except TypeError:
        shape = None
    if shape is None or len(shape) != 4 or not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                                                   and d > 0 for d in shape):
        raise ValueError(f"x_shape must be the 4-D shape of the forward's x ({layout}: 4 positive ints), "
                         f"got {x_shape!r}")
    return tuple(int(d) for d in shape)


def maxpool2d_forward(x, *, layout, size=2, out=None, argmax_out=None):
    """(y, argmax): the max of each size x size window (NaN if the window holds one, as in PyTorch)."""
    check_layout(layout)
    x = f32("x", x, 4)
    shape = _pooled_shape(x.shape, layout, size)
    y = out_buffer(out, shape)
    arg = out_buffer(argmax_out, shape, "argmax_out", np.int8)
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
    x_shape = _x_shape(x_shape, layout)
    shape = _pooled_shape(x_shape, layout, size)
    if not isinstance(argmax, np.ndarray) or argmax.dtype != np.int8:
        raise TypeError(f"argmax must be the int8 array maxpool2d_forward returned, got "
                        f"{getattr(argmax, 'dtype', type(argmax).__name__)}")
    if dy.shape != shape or argmax.shape != shape:
        raise ValueError(f"dy {dy.shape} and argmax {argmax.shape} must both be {shape} for x {x_shape}")
    argmax = np.ascontiguousarray(argmax)
    dx = out_buffer(out, x_shape)
    no_overlap("out", dx, {"dy": dy, "argmax": argmax})
    if size == 2 and layout == "NCHW":
        _unpool2_nchw(dx.size, dy, argmax, dx)
    else:
        (_unpool_nchw if layout == "NCHW" else _unpool_nhwc)(dx.size, dy, argmax, size, dx)
    return dx
