"""Fused, in-place optimizer updates on flat float32 parameters.

One compiled call per parameter buffer per step instead of ~8 numpy ufunc calls: the small models
are bound by per-call overhead, not arithmetic (hyper-parameters are passed as Python floats:
numba types those faster than numpy scalars). Slots (momentum, moments, accumulators) are the
caller's float32 arrays, updated in place; nothing is allocated.
"""

import math

from numba import prange

from ._checks import f32, no_overlap, number, same_shape, writeable
from ._jit import kernel


@kernel
def _sgd(p, g, v, lr, momentum):
    for i in prange(p.size):
        v[i] = momentum * v[i] - lr * g[i]
        p[i] += v[i]


@kernel
def _adam(p, g, m, v, lr_t, b1, b2, eps):
    for i in prange(p.size):
        m[i] = b1 * m[i] + (1 - b1) * g[i]
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
        p[i] -= lr_t * m[i] / (math.sqrt(v[i]) + eps)


@kernel
def _rmsprop(p, g, a, lr, rho, eps):
    for i in prange(p.size):
        a[i] = rho * a[i] + (1 - rho) * g[i] * g[i]
        p[i] -= lr * g[i] / (math.sqrt(a[i]) + eps)


@kernel
def _adadelta(p, g, a, d, lr, rho, eps):
    for i in prange(p.size):
        a[i] = rho * a[i] + (1 - rho) * g[i] * g[i]
        step = g[i] * math.sqrt(d[i] + eps) / math.sqrt(a[i] + eps)
        d[i] = rho * d[i] + (1 - rho) * step * step
        p[i] -= lr * step


def _flat(p, g, **slots):
    """Flat views of the arrays. The updated ones (p and the slots) must be writeable,
    C-contiguous (or the update would land in a copy) and apart from each other and from g."""
    g = f32("g", g)
    updated = {"p": p} | slots
    for name, a in updated.items():
        f32(name, a)
        if not a.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous to be updated in place")
        writeable(name, a)
        same_shape("p", p, name, a)
    same_shape("p", p, "g", g)
    names = list(updated)
    for i, name in enumerate(names):
        no_overlap(name, updated[name], {"g": g} | {other: updated[other] for other in names[i + 1:]})
    return [a.reshape(-1) for a in (p, g, *slots.values())]


def sgd_update(p, g, velocity, *, lr, momentum=0.0):
    """velocity = momentum * velocity - lr * g; p += velocity."""
    args = _flat(p, g, velocity=velocity)
    _sgd(p.size, *args, number("lr", lr), number("momentum", momentum))


def adam_update(p, g, m, v, *, lr_t, beta1, beta2, eps):
    """Adam with the bias correction folded into lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t)."""
    args = _flat(p, g, m=m, v=v)
    _adam(p.size, *args, number("lr_t", lr_t), number("beta1", beta1), number("beta2", beta2), number("eps", eps))


def rmsprop_update(p, g, avg_sq, *, lr, rho, eps):
    args = _flat(p, g, avg_sq=avg_sq)
    _rmsprop(p.size, *args, number("lr", lr), number("rho", rho), number("eps", eps))


def adadelta_update(p, g, avg_sq, avg_step, *, lr, rho, eps):
    args = _flat(p, g, avg_sq=avg_sq, avg_step=avg_step)
    _adadelta(p.size, *args, number("lr", lr), number("rho", rho), number("eps", eps))
