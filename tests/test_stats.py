"""The statistics: Theil-Sen against scipy, quantiles of long series, and the slowdown test's
false-alarm and detection rates on a small seeded simulation (benchmarks/detection.py runs the
large one)."""

import numpy as np
import pytest

from benchmarks.detection import rates
from profiler.analysis import stats


@pytest.mark.slow   # imports scipy (about a second)
def test_theil_sen_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x = np.arange(40.0)
    y = 3 + 0.5 * x + rng.standard_t(2, 40)
    ours = stats.theil_sen(x, y)
    theirs = scipy_stats.theilslopes(y, x, method="joint")
    assert ours.slope == pytest.approx(theirs.slope)
    assert (ours.slope_low, ours.slope_high) == pytest.approx((theirs.low_slope, theirs.high_slope))
    assert ours.start == pytest.approx(theirs.intercept)      # the fitted value at x = 0


def test_theil_sen_degenerate_inputs():
    assert stats.theil_sen([], []).slope == 0.0
    assert stats.theil_sen([1, 1, 1], [1, 2, 3]).start == 2.0
    assert stats.slope([0, 1], [0, 1]) == 0.0


def test_quantiles_of_a_stream():
    rng = np.random.default_rng(1)
    values = rng.lognormal(np.log(0.005), 0.5, 100_000)
    q = stats.Quantiles()
    for chunk in np.array_split(values, 7):
        q.add(chunk)
    for p in (0.25, 0.5, 0.99):
        assert q.quantile(p) == pytest.approx(np.quantile(values, p), rel=0.01)


def test_quantiles_stay_within_the_values():
    # a new user's run: p99 181.60 ms over a slowest step of 181.10 ms (the top bin's middle)
    q = stats.Quantiles()
    q.add([0.005] * 98 + [0.1811, 0.1811])
    assert q.quantile(0.99) == 0.1811 and q.quantile(1.0) == 0.1811
    q.add([0.0041])
    assert q.quantile(0.0) == 0.0041


def test_quantiles_cover_every_time_the_reader_accepts():
    """Steps of hours up to the reader's bound (1e7 s) keep their size, not a 3-hour cap."""
    from profiler.rundir.reader import MAX_SECONDS
    q = stats.Quantiles()
    q.add([5 * 3600.0, 5 * 3600.0, MAX_SECONDS])
    assert q.quantile(0.5) == pytest.approx(5 * 3600.0, rel=0.006)
    assert q.quantile(1.0) == pytest.approx(MAX_SECONDS, rel=0.006)


def test_change_reports_its_uncertainty():
    x = np.arange(100)
    c = stats.change(x, 0.01 * (1 + 0.3 * x / 99))
    assert c.sustained and c.relative == pytest.approx(0.3, rel=0.02)
    noisy = stats.change(x, 0.01 * (1 + 0.3 * x / 99) * np.random.default_rng(2).lognormal(0, 0.03, 100))
    assert noisy.sustained and noisy.relative_low < 0.3 < noisy.relative_high
    assert noisy.relative_high - noisy.relative_low < 0.2
    flat = stats.change(x, np.full(100, 0.01))
    assert not flat.sustained and flat.relative == 0.0


def test_false_alarms_and_detection_on_a_seeded_simulation():
    r = rates(runs=200, seed=3)
    assert r["false_slower"] <= 0.01 and r["false_faster"] <= 0.02
    assert r["detected"] >= 0.95 and r["faster"] >= 0.95


def test_a_fall_is_never_more_than_all_of_it():
    # epochs that shrink from 50 ms to ~1 ms with noise: the fitted line, and its interval, pass below zero
    x = np.arange(12)
    y = np.array([50, 48, 30, 44, 20, 25, 9, 12, 2, 4, 1, 1], float) * 1e-3
    c = stats.change(x, y)
    assert c.fitted and -1.0 <= c.relative_low <= c.relative <= c.relative_high <= 0.0
