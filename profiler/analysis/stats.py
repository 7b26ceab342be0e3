"""Robust series statistics (numpy only): medians over windows, a Theil-Sen trend with its 95%
confidence interval, and the test that calls a trend a sustained change.

A shared machine switches between speeds for seconds at a time, has one-off slow epochs and
heavy-tailed jitter, and all of them make epochs slower, never faster. So a series is first
reduced to the lower quartile of each of at most TREND_BINS bins (a slowdown slows every epoch,
the fastest included; outliers and a level switch over part of a bin do not move its lower
quartile), the trend is fitted to those, and a change is called sustained only when the fitted
change over the run is large enough and the run's last tenth still shows it (a level switch that
reverted does not). Sen's confidence interval is
reported, and required only for runs too short to bin (under 2 x TREND_BINS epochs): it assumes
independent points, which a machine that switches speeds is not. benchmarks/detection.py measures the false-alarm and detection
rates of `sustained` on seeded simulated runs (docs/findings.md).
"""

from dataclasses import dataclass

import numpy as np

MIN_POINTS = 8        # change(): fewer points tell no trend
WARMUP_MIN_EPOCHS = 4  # warmup(): runs this long leave their first epochs out
MAX_POINTS = 200      # slope(): Theil-Sen is O(n^2), so long series are reduced to bin medians first
TREND_BINS = 15       # change(): bins whose lower quartiles the trend is fitted to
QUANTILE = 0.25
SLOWER = 0.07         # fitted relative change over the run that counts as slower...
FASTER = -0.10        # ...or faster (stricter: noise on a shared machine only ever slows epochs)
END_CHANGE = 0.05     # relative change the run's last tenth must still show (a switch that reverted does not)
Z95 = 1.959964


@dataclass(frozen=True)
class Trend:
    """A Theil-Sen line through (x, y): slope per unit of x with its 95% interval, and the fitted
    values at the first and last x."""
    slope: float
    slope_low: float
    slope_high: float
    start: float
    end: float
    span: float       # last x - first x


@dataclass(frozen=True)
class Change:
    """How much a series changed over a run, relative to its start, with a 95% interval, and
    whether the change is sustained (a trend that holds to the end, not noise)."""
    relative: float        # fitted end / fitted start - 1
    relative_low: float
    relative_high: float
    early: float           # median of the early window
    late: float            # median of the late window
    sustained: bool        # a sustained change in the direction of `relative`
    fitted: bool = True    # False: no trend was fitted (relative is 0): fewer than MIN_POINTS points, or the
                           # fitted line starts at or below zero, where a relative change means nothing


def warmup(n):
    """Epochs to skip at the start (JIT compilation, first-touch of buffers, cache warm-up): none
    in a run of fewer than WARMUP_MIN_EPOCHS, whose warm-up stays in."""
    return 0 if n < WARMUP_MIN_EPOCHS else max(1, min(5, n // 10))


def window(n):
    """Items in the early and the late window: a quarter of the series, at most 100."""
    return max(1, min(100, n // 4))


def early_late(values):
    """Medians of the early and the late window (0.0, 0.0 for an empty series)."""
    values = np.asarray(values, float)
    if len(values) == 0:
        return 0.0, 0.0
    w = window(len(values))
    return float(np.median(values[:w])), float(np.median(values[-w:]))


def binned(x, y, bins=MAX_POINTS, q=0.5):
    """(x, y) reduced to at most `bins` bins: each bin's median x and its y quantile `q`."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) <= bins:
        return x, y
    edges = np.linspace(0, len(x), bins + 1).astype(int)
    starts, sizes = edges[:-1], np.diff(edges)
    bx, by = np.empty(bins), np.empty(bins)
    for size in np.unique(sizes):   # bins come in at most two sizes: one numpy call per size
        chosen = np.flatnonzero(sizes == size)
        index = starts[chosen, None] + np.arange(size)
        bx[chosen], by[chosen] = np.median(x[index], axis=1), np.quantile(y[index], q, axis=1)
    return bx, by


def theil_sen(x, y):
    """Theil-Sen trend of y over x with Sen's 95% interval for the slope (as scipy.stats.theilslopes
    computes it, without tie correction); a flat line when there are fewer than 3 distinct x."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) == 0:
        return Trend(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    i, j = np.triu_indices(len(x), k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    span = float(x.max() - x.min())
    if keep.sum() < 3:
        level = float(np.median(y))
        return Trend(0.0, 0.0, 0.0, level, level, span)
    slopes = np.sort((y[j] - y[i])[keep] / dx[keep])
    slope = float(np.median(slopes))
    intercept = float(np.median(y - slope * x))
    n, m = len(x), len(slopes)
    sigma = np.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    low = int(max(np.round((m - Z95 * sigma) / 2.0) - 1, 0))
    high = int(min(np.round((m + Z95 * sigma) / 2.0), m - 1))
    return Trend(slope, float(slopes[low]), float(slopes[high]), intercept + slope * float(x.min()),
                 intercept + slope * float(x.max()), span)


def slope(x, y):
    """Theil-Sen slope of y over x, fitted to bin medians (0.0 when fewer than 3 points)."""
    return theil_sen(*binned(x, y)).slope


def change(x, y, early_floor=False):
    """The relative change of y over x and whether it is sustained (see the module docstring).
    early_floor: where the fitted line starts at or below zero, relative to the early window's
    lower quartile, the level the line is fitted to (steps whose time grows from a few
    microseconds: the line fitted to them starts below zero)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    early, late = early_late(y)
    if len(y) < MIN_POINTS:
        return Change(0.0, 0.0, 0.0, early, late, False, fitted=False)
    bx, by = binned(x, y, TREND_BINS, QUANTILE)
    trend = theil_sen(bx, by)
    span = float(x[-1] - x[0])      # the trend over the whole run, not between the bins' centres
    base = trend.start - trend.slope * (bx[0] - x[0])
    if early_floor and base <= 0:
        base = float(np.quantile(y[:window(len(y))], QUANTILE))
    if base <= 0:   # a line that starts at or below zero has no relative change (a step up from ~0 fits one)
        return Change(0.0, 0.0, 0.0, early, late, False, fitted=False)
    # a time or a size falls by 100% at most: a steep line's end, or its interval's, may pass below zero
    relative, low, high = (max(slope * span / base, -1.0) for slope in (trend.slope, trend.slope_low, trend.slope_high))
    tail = float(np.quantile(y[-max(3, len(y) // 10):], QUANTILE)) / base - 1
    short = len(y) < 2 * TREND_BINS   # too few epochs for bins to tame the noise: the interval must agree
    if relative > 0:
        sustained = relative >= SLOWER and tail >= END_CHANGE and (low > 0 or not short)
    else:
        sustained = relative <= FASTER and tail <= -END_CHANGE and (high < 0 or not short)
    return Change(float(relative), float(low), float(high), early, late, bool(sustained))


# -- times within spans --------------------------------------------------------------------------

def within(begin, wall, t):
    """For spans [begin, begin + wall) in order of begin (epochs, steps) and times t (GC events):
    the index of the last span that began at or before each time (-1: none), and whether the time
    falls inside that span."""
    begin, t = np.asarray(begin, float), np.asarray(t, float)
    last = np.searchsorted(begin, t, side="right") - 1
    end = begin + np.asarray(wall, float)
    return last, (last >= 0) & (t < end[np.maximum(last, 0)])


# -- quantiles of long series in constant memory -----------------------------------------------

HIST_EDGES = np.geomspace(1e-7, 1e7, 5462)   # 0.6% wide bins from 0.1 us to 1e7 s (rundir.reader.MAX_SECONDS)


class Quantiles:
    """Approximate quantiles of a stream of durations (seconds) in constant memory: counts in
    log-spaced bins 0.6% wide, fed chunk by chunk; an estimate never leaves the values' range (a
    bin's middle could: a p99 of 181.60 ms over a slowest step of 181.10)."""

    def __init__(self):
        self.counts = np.zeros(len(HIST_EDGES) + 1, np.int64)
        self.n = 0
        self.low, self.high = np.inf, -np.inf

    def add(self, values):
        values = np.asarray(values, float)
        self.counts += np.bincount(np.searchsorted(HIST_EDGES, values), minlength=len(self.counts))
        self.n += len(values)
        if len(values):
            self.low, self.high = min(self.low, float(values.min())), max(self.high, float(values.max()))

    def quantile(self, q):
        if self.n == 0:
            return 0.0
        index = int(np.searchsorted(np.cumsum(self.counts), q * self.n, side="left"))
        if index == 0:
            estimate = float(HIST_EDGES[0])
        elif index >= len(HIST_EDGES):
            estimate = float(HIST_EDGES[-1])
        else:
            estimate = float(np.sqrt(HIST_EDGES[index - 1] * HIST_EDGES[index]))
        return min(max(estimate, self.low), self.high)
