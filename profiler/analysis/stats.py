"""Robust series statistics: medians over windows and a Theil-Sen trend, so a noisy shared machine
is not read as a slowdown and one slow epoch is not read as a trend."""

import numpy as np
from scipy.stats import theilslopes

MAX_POINTS = 200  # Theil-Sen is O(n^2): long runs are reduced to medians of bins first


def warmup(n):
    """Epochs to skip at the start (JIT compilation, first-touch of buffers, cache warm-up)."""
    return 0 if n < 4 else max(1, min(5, n // 10))


def window(n):
    """Epochs in the early and the late window: a quarter of the run, at most 100."""
    return max(1, min(100, n // 4))


def early_late(values):
    values = np.asarray(values, float)
    w = window(len(values))
    return float(np.median(values[:w])), float(np.median(values[-w:]))


def binned(x, y, max_points=MAX_POINTS):
    """(x, y) reduced to at most max_points bins, each the median of its bin."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) <= max_points:
        return x, y
    edges = np.linspace(0, len(x), max_points + 1).astype(int)
    return (np.array([np.median(x[a:b]) for a, b in zip(edges[:-1], edges[1:])]),
            np.array([np.median(y[a:b]) for a, b in zip(edges[:-1], edges[1:])]))


def slope(x, y):
    """Theil-Sen slope of y over x (0.0 when fewer than 3 points)."""
    if len(x) < 3:
        return 0.0
    bx, by = binned(x, y)
    return float(theilslopes(by, bx)[0])
