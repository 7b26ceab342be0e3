"""Softmax fused with categorical cross-entropy: the value and the gradient w.r.t. the logits.

Fusing is what makes it numerically stable (log-sum-exp with the row max subtracted) and cheap
(the gradient is softmax - target, no division by a probability).
"""

import math

import numpy as np
from numba import prange

from ._checks import f32, no_overlap, out_buffer, same_shape
from ._jit import kernel


@kernel
def _softmax_xent(logits, target, probs, grad):
    n, k = logits.shape
    losses = np.empty(n, np.float64)
    for i in prange(n):
        row, t, p = logits[i], target[i], probs[i]
        top = row[0]
        for j in range(k):
            top = max(top, row[j])
        total = 0.0
        for j in range(k):
            p[j] = math.exp(row[j] - top)
            total += p[j]
        log_total = math.log(total)
        loss = 0.0
        for j in range(k):
            p[j] = p[j] / total
            loss -= t[j] * (row[j] - top - log_total)
            grad[i, j] = (p[j] - t[j]) / n
        losses[i] = loss
    return losses.sum() / n


def softmax_cross_entropy(logits, target, *, probs_out=None, grad_out=None):
    """(mean loss, probs, dloss/dlogits) for (N, K) logits and (N, K) target distributions."""
    logits, target = f32("logits", logits, 2), f32("target", target, 2)
    same_shape("logits", logits, "target", target)
    probs = out_buffer(probs_out, logits.shape, "probs_out")
    grad = out_buffer(grad_out, logits.shape, "grad_out")
    no_overlap("probs_out", probs, {"logits": logits, "target": target, "grad_out": grad})
    no_overlap("grad_out", grad, {"logits": logits, "target": target})
    loss = _softmax_xent(logits.size, logits, target, probs, grad)
    return float(loss), probs, grad
