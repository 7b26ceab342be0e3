"""Plain float64 numpy forwards: the independent reference for finite-difference checks."""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def to_nchw(a, layout):
    return a if layout == "NCHW" or a.ndim != 4 else a.transpose(0, 3, 1, 2)


def to_layout(a, layout):
    """NCHW array -> `layout` (a C-contiguous copy)."""
    return np.ascontiguousarray(a if layout == "NCHW" else a.transpose(0, 2, 3, 1))


def same_pads(size, k, s):
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


def conv2d(x, w, layout, stride, padding):
    x = to_nchw(x, layout).astype(np.float64)
    kh, kw = w.shape[:2]
    if padding == "same":
        x = np.pad(x, ((0, 0), (0, 0), same_pads(x.shape[2], kh, stride), same_pads(x.shape[3], kw, stride)))
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]  # n c oh ow kh kw
    y = np.einsum("ncijhw,hwco->noij", win, w.astype(np.float64))
    return y if layout == "NCHW" else y.transpose(0, 2, 3, 1)


def broadcast_add(x, b, layout):
    shape = [1] * x.ndim
    shape[1 if x.ndim == 2 or layout == "NCHW" else 3] = -1
    return x.astype(np.float64) + b.astype(np.float64).reshape(shape)


def dense(x, w, b):
    return x.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)


def maxpool(x, layout, size):
    x = to_nchw(x, layout).astype(np.float64)
    n, c, h, w = x.shape
    oh, ow = h // size, w // size
    y = x[:, :, :oh * size, :ow * size].reshape(n, c, oh, size, ow, size).max(axis=(3, 5))
    return y if layout == "NCHW" else y.transpose(0, 2, 3, 1)


def softmax_xent(logits, target):
    z = logits.astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -(target * logp).sum(axis=1).mean()


def directional_fd(f, x, v, eps=1e-4):
    """(f(x + eps v) - f(x - eps v)) / 2 eps, in float64."""
    x = x.astype(np.float64)
    return (f(x + eps * v) - f(x - eps * v)) / (2 * eps)
