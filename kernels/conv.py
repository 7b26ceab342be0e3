"""conv2d forward and backward in NCHW and NHWC: numba im2col/col2im around a BLAS GEMM.

Direct numba loops reach ~20% of the machine's FMA peak; a GEMM reaches most of it. So numba only
rearranges memory (im2col for forward and weight grad, col2im for input grad) and the arithmetic is
one matmul per chunk of the batch, done by numpy's BLAS outside njit.

Copies index with a scalar offset (dst[base + k]) rather than slicing a view per patch: for the
C_in = 1 and 3 first layers that is 2.8x faster, and at C_in = 32 still 1.3x (measured here).

One core, two layouts, no transposes. The core is written for NHWC: a patch is ordered (kh, kw, c),
so the weight (KH, KW, C_in, C_out) is a (K, C_out) matrix with no copy, col is (rows=B*OH*OW, K)
and y = col @ W is NHWC. For NCHW the same numba kernels get a strided (N, H, W, C) *view* of the
NCHW array (numba compiles a strided specialisation), and the GEMMs read and write NCHW through
transposed BLAS operands: y[n] (C_out, P) = W.T @ col[n].T. An earlier version copied each batch
chunk to NHWC and back; `profiler compare` showed NCHW 1.4-1.8x slower, mostly those copies.
Except: when a plane's size in bytes is a multiple of 1 KiB (32x32, 16x16, ...), the channels of
one pixel are that far apart and fall into the same few L1 sets, and the strided view thrashes
(col2im 85 ms vs 3 ms on 32x32x32). Such calls copy each chunk to NHWC (at memcpy speed), run the
NHWC path, and copy the results back.
"""

import math

import numpy as np
from numba import prange

from ._checks import check_layout, f32, out_buffer
from ._jit import kernel
from .workspace import Workspace

_CHUNK_FLOATS = 1 << 21  # im2col scratch per chunk: 8 MB of float32


@kernel
def _im2col(x, g, col):
    """col[(b, oh, ow), (kh, kw, c)] = x[b, oh*s - pt + kh, ow*s - pl + kw, c], zero outside."""
    kh_, kw_, s, pt, pl, oh_, ow_ = g
    _, h, w, c = x.shape
    for r in prange(x.shape[0] * oh_):
        b, oh = r // oh_, r % oh_
        for ow in range(ow_):
            dst = col[r * ow_ + ow]
            for kh in range(kh_):
                ih = oh * s - pt + kh
                for kw in range(kw_):
                    iw = ow * s - pl + kw
                    base = (kh * kw_ + kw) * c
                    if 0 <= ih < h and 0 <= iw < w:
                        px = x[b, ih, iw]
                        for k in range(c):
                            dst[base + k] = px[k]
                    else:
                        for k in range(c):
                            dst[base + k] = 0.0


@kernel
def _col2im(dcol, g, dx):
    """dx[b] = sum of dcol's patches back onto the image (the adjoint of _im2col)."""
    kh_, kw_, s, pt, pl, oh_, ow_ = g
    _, h, w, c = dx.shape
    for b in prange(dx.shape[0]):  # each sample owns its image: no races
        img = dx[b]
        img[:] = 0.0
        for oh in range(oh_):
            for ow in range(ow_):
                src = dcol[(b * oh_ + oh) * ow_ + ow]
                for kh in range(kh_):
                    ih = oh * s - pt + kh
                    if ih < 0 or ih >= h:
                        continue
                    for kw in range(kw_):
                        iw = ow * s - pl + kw
                        if 0 <= iw < w:
                            base = (kh * kw_ + kw) * c
                            px = img[ih, iw]
                            for k in range(c):
                                px[k] += src[base + k]


@kernel
def _transpose(src, dst):
    """dst[b] = src[b].T for (B, R, S) -> (B, S, R). numba's transposed copy ran near memcpy speed
    here; element loops and 16/32 tiles were 1.5-10x slower."""
    for b in prange(src.shape[0]):
        dst[b] = src[b].T


def _shapes(x_shape, w_shape, layout, stride, padding):
    """Check the geometry; return (n, c, h, w, kh, kw, cout, oh, ow, pad_top, pad_left)."""
    check_layout(layout)
    if not isinstance(stride, (int, np.integer)) or isinstance(stride, bool) or stride < 1:
        raise ValueError(f"stride must be a positive int, got {stride!r}")
    if padding not in ("valid", "same"):
        raise ValueError(f"padding must be 'valid' or 'same', got {padding!r}")
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ValueError(f"x must be 4-D ({layout}) and w 4-D (KH, KW, C_in, C_out), got {x_shape} and {w_shape}")
    n, c, h, wd = x_shape if layout == "NCHW" else (x_shape[0], x_shape[3], x_shape[1], x_shape[2])
    kh, kw, cin, cout = w_shape
    if cin != c:
        raise ValueError(f"w {tuple(w_shape)} (KH, KW, C_in, C_out) expects {cin} input channels, "
                         f"but x {tuple(x_shape)} in {layout} has {c}")
    if padding == "valid":
        if kh > h or kw > wd:
            raise ValueError(f"kernel {kh}x{kw} is larger than the input {h}x{wd} "
                             f"(x {tuple(x_shape)}, {layout}) with padding 'valid'")
        return n, c, h, wd, kh, kw, cout, (h - kh) // stride + 1, (wd - kw) // stride + 1, 0, 0
    oh, ow = math.ceil(h / stride), math.ceil(wd / stride)
    pt = max((oh - 1) * stride + kh - h, 0) // 2
    pl = max((ow - 1) * stride + kw - wd, 0) // 2
    return n, c, h, wd, kh, kw, cout, oh, ow, pt, pl


class _Plan:
    """Everything one conv call needs: checked arrays, geometry, chunks, scratch views."""

    def __init__(self, x, w, layout, stride, padding, workspace):
        self.x, self.w = f32("x", x, 4), f32("w", w, 4)
        self.layout = layout
        n, c, h, wd, kh, kw, cout, oh, ow, pt, pl = _shapes(self.x.shape, self.w.shape, layout, stride, padding)
        self.n, self.c, self.h, self.wd, self.cout, self.oh, self.ow = n, c, h, wd, cout, oh, ow
        self.geometry = (kh, kw, stride, pt, pl, oh, ow)
        self.kdim, self.p = kh * kw * c, oh * ow
        self.wm = self.w.reshape(self.kdim, cout)
        self.ws = workspace if workspace is not None else Workspace()
        self.copy = layout == "NCHW" and (h * wd * 4) % 1024 == 0   # L1 set aliasing: module docstring
        self.direct = layout == "NCHW" and not self.copy            # strided views, transposed GEMMs
        step = max(1, min(n, _CHUNK_FLOATS // (self.p * self.kdim)))
        self.chunks = [(n0, min(n, n0 + step)) for n0 in range(0, n, step)]

    @property
    def y_shape(self):
        n, cout, oh, ow = self.n, self.cout, self.oh, self.ow
        return (n, cout, oh, ow) if self.layout == "NCHW" else (n, oh, ow, cout)

    def col(self, b):
        return self.ws.take("col", (b * self.p, self.kdim))

    def read(self, a, n0, n1, name):
        """Chunk [n0, n1) of `a` (this call's layout) as (B, H, W, C) to read: a view of NHWC, a
        strided view of NCHW, or a transposed copy in scratch."""
        if self.layout == "NHWC":
            return a[n0:n1]
        if self.direct:
            return a[n0:n1].transpose(0, 2, 3, 1)
        out = self.target(a, n0, n1, name)
        b, c = out.shape[0], out.shape[3]
        _transpose(out.size, a[n0:n1].reshape(b, c, -1), out.reshape(b, -1, c))
        return out

    def target(self, a, n0, n1, name):
        """Where to write chunk [n0, n1) of `a` as (B, H, W, C); store() then puts copies in place."""
        if self.layout == "NHWC":
            return a[n0:n1]
        if self.direct:
            return a[n0:n1].transpose(0, 2, 3, 1)
        b, c, h, w = a[n0:n1].shape
        return self.ws.take(name, (b, h, w, c))

    def store(self, nhwc, a, n0, n1):
        if self.copy:
            b, c = nhwc.shape[0], nhwc.shape[3]
            _transpose(nhwc.size, nhwc.reshape(b, -1, c), a[n0:n1].reshape(b, c, -1))


def conv2d_output_shape(x_shape, w_shape, *, layout, stride=1, padding="valid"):
    """Shape of conv2d_forward's result, without computing it."""
    n, _, _, _, _, _, cout, oh, ow, _, _ = _shapes(tuple(x_shape), tuple(w_shape), layout, stride, padding)
    return (n, cout, oh, ow) if layout == "NCHW" else (n, oh, ow, cout)


def conv2d_forward(x, w, *, layout, stride=1, padding="valid", out=None, workspace=None):
    """Cross-correlation of x with w, no bias (add it with broadcast_add_forward).

    `workspace` (a kernels.Workspace kept by the caller) holds the scratch between calls;
    without one, each call allocates its own.
    """
    plan = _Plan(x, w, layout, stride, padding, workspace)
    y = out_buffer(out, plan.y_shape)
    for n0, n1 in plan.chunks:
        col = plan.col(n1 - n0)
        _im2col(col.size, plan.read(plan.x, n0, n1, "x"), plan.geometry, col)
        if plan.direct:  # y[n] (C_out, P) = W.T @ col[n].T, written in place as NCHW
            np.matmul(plan.wm.T, col.reshape(n1 - n0, plan.p, plan.kdim).transpose(0, 2, 1),
                      out=y.reshape(plan.n, plan.cout, plan.p)[n0:n1])
        else:
            ys = plan.target(y, n0, n1, "y")
            np.matmul(col, plan.wm, out=ys.reshape(-1, plan.cout))
            plan.store(ys, y, n0, n1)
    return y


def conv2d_backward(x, w, dy, *, layout, stride=1, padding="valid", out=None, workspace=None):
    """(dx, dw) for y = conv2d_forward(x, w); `out` is an optional (dx, dw) pair of buffers."""
    plan = _Plan(x, w, layout, stride, padding, workspace)
    dy = f32("dy", dy, 4)
    if dy.shape != plan.y_shape:
        raise ValueError(f"dy has shape {dy.shape}, but conv2d of x {plan.x.shape} with w {plan.w.shape} "
                         f"({layout}, stride {stride}, {padding}) gives {plan.y_shape}")
    dx_out, dw_out = out if out is not None else (None, None)
    dx = out_buffer(dx_out, plan.x.shape, "out[0] (dx)")
    dw = out_buffer(dw_out, plan.w.shape, "out[1] (dw)")
    dwm = dw.reshape(plan.kdim, plan.cout)
    dwm[:] = 0.0
    part = plan.ws.take("dw_part", dwm.shape)
    for n0, n1 in plan.chunks:
        b = n1 - n0
        col = plan.col(b)
        _im2col(col.size, plan.read(plan.x, n0, n1, "x"), plan.geometry, col)
        if plan.direct:  # dy[n] is (C_out, P): per sample dW += col[n].T @ dy[n].T, dcol[n] = dy[n].T @ W.T
            dyc, cols = dy.reshape(plan.n, plan.cout, plan.p)[n0:n1], col.reshape(b, plan.p, plan.kdim)
            for i in range(b):
                dwm += np.matmul(cols[i].T, dyc[i].T, out=part)
            np.matmul(dyc.transpose(0, 2, 1), plan.wm.T, out=cols)
        else:
            rows = plan.read(dy, n0, n1, "dy").reshape(-1, plan.cout)
            dwm += np.matmul(col.T, rows, out=part)
            np.matmul(rows, plan.wm.T, out=col)
        dxs = plan.target(dx, n0, n1, "dx")
        _col2im(col.size, col, plan.geometry, dxs)
        plan.store(dxs, dx, n0, n1)
    return dx, dw
