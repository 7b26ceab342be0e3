"""Elementwise activations, forward and backward. Layout-free: they see a flat array.

sigmoid avoids exp: without Intel's SVML (PyPI's llvmlite is not built for it) numba calls libm's
expf per element, 130 us on 250x100 here, and numpy's exp took 70 us. sigmoid(x) = 0.5 + 0.5 tanh(x/2)
with Eigen's rational tanh (only multiply, add, divide, so it vectorises) took 17 us. Absolute error
<= 2e-7 (about float32's ulp at 0.5), clamped to [0, 1], monotone up to rounding (steps of
-3e-8 near saturation); relative error grows only where the output is below ~1e-4.
"""

import numpy as np
from numba import prange

from ._checks import f32, no_overlap, out_buffer, same_shape
from ._jit import Kernel, helper


@helper
def _relu(x):
    return max(x, np.float32(0.0))


@helper
def _relu_grad(y, dy):
    return dy if y > 0 else np.float32(0.0)


@helper
def _sigmoid(x):
    t = min(max(np.float32(0.5) * x, np.float32(-9.0)), np.float32(9.0))   # tanh(9) == 1 in float32
    t2 = t * t
    p = t2 * np.float32(-2.76076847742355e-16) + np.float32(2.00018790482477e-13)
    p = t2 * p + np.float32(-8.60467152213735e-11)
    p = t2 * p + np.float32(5.12229709037114e-08)
    p = t2 * p + np.float32(1.48572235717979e-05)
    p = t2 * p + np.float32(6.37261928875436e-04)
    p = t2 * p + np.float32(4.89352455891786e-03)
    q = t2 * np.float32(1.19825839466702e-06) + np.float32(1.18534705686654e-04)
    q = t2 * q + np.float32(2.26843463243900e-03)
    q = t2 * q + np.float32(4.89352518554385e-03)
    v = np.float32(0.5) + np.float32(0.5) * (t * p / q)
    return min(max(v, np.float32(0.0)), np.float32(1.0))   # value first: min/max keep a NaN that comes first


@helper
def _sigmoid_grad(y, dy):
    return dy * y * (np.float32(1.0) - y)


# One loop nest per direction, and an in-place one beside each: with the output aliasing an input
# LLVM's run-time overlap check sends the out-of-place loops to their scalar fallback (the relu
# grad's branch on y > 0 then mispredicts: 82 us against 8 on 250x100; sigmoid 100 against 14).
def _map(x, y):
    for i in prange(x.size):
        y[i] = _fn(x[i])


def _map_in_place(x):
    for i in prange(x.size):
        x[i] = _fn(x[i])


def _grad(y, dy, dx):
    for i in prange(y.size):
        dx[i] = _fn(y[i], dy[i])


def _grad_in_place(y, dy):
    for i in prange(y.size):
        dy[i] = _fn(y[i], dy[i])


def _kernels(loop, in_place, fn, key):
    return Kernel(loop, {"_fn": fn}, key), Kernel(in_place, {"_fn": fn}, key)


_KERNELS = {"relu": (_kernels(_map, _map_in_place, _relu, "relu"),
                     _kernels(_grad, _grad_in_place, _relu_grad, "relu")),
            "sigmoid": (_kernels(_map, _map_in_place, _sigmoid, "sigmoid"),
                        _kernels(_grad, _grad_in_place, _sigmoid_grad, "sigmoid"))}


def _forward(kind, x, out):
    x = f32("x", x)
    y = out_buffer(out, x.shape)
    no_overlap("out", y, {"x": x}, in_place=("x",))
    loop, in_place = _KERNELS[kind][0]
    if np.may_share_memory(y, x):   # y is x itself (no_overlap allows nothing else)
        in_place(x.size, x.reshape(-1))
    else:
        loop(x.size, x.reshape(-1), y.reshape(-1))
    return y


def _backward(kind, y, dy, out):
    y, dy = f32("y", y), f32("dy", dy)
    same_shape("y", y, "dy", dy)
    dx = out_buffer(out, y.shape)
    no_overlap("out", dx, {"y": y, "dy": dy}, in_place=("y", "dy"))
    loop, in_place = _KERNELS[kind][1]
    if np.may_share_memory(dx, dy):   # dx is dy itself (no_overlap allows nothing else)
        in_place(y.size, y.reshape(-1), dy.reshape(-1))
    else:
        loop(y.size, y.reshape(-1), dy.reshape(-1), dx.reshape(-1))
    return dx


def relu_forward(x, *, out=None):
    """max(x, 0); `out` may be x itself (in place)."""
    return _forward("relu", x, out)


def relu_backward(y, dy, *, out=None):
    """dx from the forward *output* y (y > 0 exactly where x > 0), so x need not be kept."""
    return _backward("relu", y, dy, out)


def sigmoid_forward(x, *, out=None):
    """1 / (1 + exp(-x)); `out` may be x itself (in place)."""
    return _forward("sigmoid", x, out)


def sigmoid_backward(y, dy, *, out=None):
    """dx = dy * y * (1 - y), from the forward output y."""
    return _backward("sigmoid", y, dy, out)
