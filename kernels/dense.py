"""dense (fully connected) forward and backward: the register-blocked micro-kernel of _tile.py,
plus the numba bias kernels.

The GEMMs used to go to numpy's BLAS. In a training step they sit between numba's parallel
kernels, and OpenBLAS's idle threads spin for a while after every call: on 2 cores they took the
cores from numba's workers and cifar10-cnn ran no faster on 2 threads than on 1 (121 vs 126 ms
per step; 73 with OpenBLAS single-threaded). In numba, all kernels share one thread pool.

Each product is C = A @ B with A and C read and written through strides (so x.T, w and dx.T need
no copies) and B packed into 16-column panels (w for the forward, dy or dy.T for the backward) in
the caller's workspace. The bias uses broadcast_add on (N, C), the kernel the conv layers use.
"""

import numpy as np
from numba import prange

from ._checks import f32, out_buffer
from ._jit import kernel
from ._tile import J, P, panels, tile
from .bias import broadcast_add_backward, broadcast_add_forward
from .workspace import Workspace

_KB = 256       # reduction block: a 256 x 16 slice of B (16 KB) stays in L1 across a band of rows
_BAND = 8 * P   # rows and
_GROUP = 4 * J  # columns per parallel iteration: enough iterations for the threads even when M is a batch of 32
_BLAS_MAX = 65536 * 4   # OpenBLAS runs GEMMs of fewer multiply-adds on the calling thread alone


@kernel
def _matmul(a, sam, sak, b, m_, n, c, scm, scn):
    """C = A @ B for A[m, k] = a[m*sam + k*sak] and C[m, n] = c[m*scm + n*scn] (M x N): strides,
    so transposed operands and results need no copies; b holds B as (N/J, K, J) panels."""
    _, k_, _ = b.shape
    bf = b.reshape(-1)
    groups = (n + _GROUP - 1) // _GROUP
    for it in prange((m_ + _BAND - 1) // _BAND * groups):   # bands of rows x groups of columns
        m0, g0 = it // groups * _BAND, it % groups * _GROUP
        for k0 in range(0, k_, _KB):
            kn = min(_KB, k_ - k0)
            for n0 in range(g0, min(n, g0 + _GROUP), J):   # each B slice serves the band's 8 blocks
                for r0 in range(m0, min(m_, m0 + _BAND), P):
                    tile(a, r0 * sam + k0 * sak, sam, min(P, m_ - r0), (0, 0, sak), bf, n0 * k_ + k0 * J, (0, 0, J),
                         (1, 1, kn), c, r0 * scm + n0 * scn, scm, scn, min(J, n - n0), k0 > 0)


def _flat(a):
    """A C- or F-ordered matrix as (flat view, row stride, column stride) in elements, no copy."""
    if a.flags.c_contiguous:
        return a.reshape(-1), a.shape[1], 1
    return a.T.reshape(-1), 1, a.shape[0]


def _product(ws, name, a, b, out):
    """out = a @ b, where a and out may be transposes of contiguous arrays. Products below
    OpenBLAS's own single-thread threshold go to numpy (its threads stay asleep, and numba's
    packing and dispatch would cost more than the product: the mlp's 250x2 @ 2x100)."""
    m, k = a.shape
    if m * k * b.shape[1] < _BLAS_MAX:
        return np.matmul(a, b, out=out)
    af, sam, sak = _flat(a)
    of, scm, scn = _flat(out)
    _matmul(m * k * b.shape[1], af, sam, sak, panels(ws, name, b), m, b.shape[1], of, scm, scn)
    return out


def _check(x, w):
    x, w = f32("x", x, 2), f32("w", w, 2)
    if x.shape[1] != w.shape[0]:
        raise ValueError(f"x {x.shape} has {x.shape[1]} features but w {w.shape} (I, O) expects {w.shape[0]}")
    return x, w


def dense_forward(x, w, b, *, out=None, workspace=None):
    """y = x @ w + b, with x (N, I), w (I, O), b (O,). `workspace` (a kernels.Workspace kept by
    the caller) holds the packed operands between calls."""
    x, w = _check(x, w)
    b = f32("b", b, 1)
    if b.shape[0] != w.shape[1]:
        raise ValueError(f"b {b.shape} must have one entry per output of w {w.shape}")
    ws = workspace if workspace is not None else Workspace()
    y = out_buffer(out, (x.shape[0], w.shape[1]))
    _product(ws, "dense.w", x, w, y)
    return broadcast_add_forward(y, b, layout="NHWC", out=y)


def dense_backward(x, w, dy, *, out=None, workspace=None):
    """(dx, dw, db) for y = dense_forward(x, w, b); `out` is an optional (dx, dw, db) triple."""
    x, w = _check(x, w)
    dy = f32("dy", dy, 2)
    if dy.shape != (x.shape[0], w.shape[1]):
        raise ValueError(f"dy has shape {dy.shape}, expected {(x.shape[0], w.shape[1])} for x {x.shape}, w {w.shape}")
    ws = workspace if workspace is not None else Workspace()
    dx_out, dw_out, db_out = out if out is not None else (None, None, None)
    dx = out_buffer(dx_out, x.shape, "out[0] (dx)")
    _product(ws, "dense.dyT", w, dy.T, dx.T)   # dx.T = w @ dy.T: w read in place, only dy is packed
    dw = _product(ws, "dense.dy", x.T, dy, out_buffer(dw_out, w.shape, "out[1] (dw)"))
    db = broadcast_add_backward(dy, layout="NHWC", out=db_out)
    return dx, dw, db
