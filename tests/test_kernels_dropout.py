"""Dropout's counter-based mask: scale, keep rate, the backward's mask, seeds, NaN, bad arguments."""

import numpy as np
import pytest

from kernels._jit import PARALLEL_MIN
from kernels import dropout_backward, dropout_forward


@pytest.mark.parametrize("rate", [0.25, 0.5])
def test_kept_elements_are_scaled_and_the_keep_rate_is_one_minus_rate(rate, rng):
    x = rng.standard_normal(1 << 20).astype(np.float32)
    y = dropout_forward(x, rate=rate, seed=3)
    kept = y != 0
    np.testing.assert_array_equal(y[kept], x[kept] * np.float32(1 / (1 - rate)))
    sigma = np.sqrt(rate * (1 - rate) / x.size)
    assert abs(kept.mean() - (1 - rate)) < 5 * sigma
    # independent of position: each half and every 8th element keep at the same rate
    for part in (kept[: x.size // 2], kept[x.size // 2:], kept[::8], kept[1::8]):
        assert abs(part.mean() - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / part.size)


def test_the_backward_uses_the_forwards_mask_and_scale(rng):
    x = rng.standard_normal((32, 6, 6, 64)).astype(np.float32) + 10   # no zeros
    dy = rng.standard_normal(x.shape).astype(np.float32) + 10
    y = dropout_forward(x, rate=0.25, seed=2**64 - 1)
    dx = dropout_backward(dy, rate=0.25, seed=2**64 - 1)
    np.testing.assert_array_equal(dx != 0, y != 0)
    np.testing.assert_array_equal(dx[dx != 0], dy[dx != 0] * np.float32(4 / 3))


def test_the_mask_depends_on_the_seed_and_the_index_only(rng):
    big = np.ones(4 * PARALLEL_MIN, np.float32)   # the parallel twin
    small = big[:1000].copy()                      # the serial twin
    a = dropout_forward(big, rate=0.5, seed=11)
    np.testing.assert_array_equal(dropout_forward(small, rate=0.5, seed=11), a[:1000])
    np.testing.assert_array_equal(dropout_forward(big, rate=0.5, seed=11), a)
    b = dropout_forward(big, rate=0.5, seed=12)
    assert abs(((a != 0) == (b != 0)).mean() - 0.5) < 0.01   # another seed: an unrelated mask


def test_in_place_rate_zero_and_nan(rng):
    x = rng.standard_normal(5000).astype(np.float32)
    np.testing.assert_array_equal(dropout_forward(x, rate=0.0, seed=1), x)
    y = x.copy()
    assert dropout_forward(y, rate=0.5, seed=1, out=y) is y
    np.testing.assert_array_equal(y, dropout_forward(x, rate=0.5, seed=1))
    x[:] = np.nan
    assert np.isnan(dropout_forward(x, rate=0.5, seed=1)).all()   # dropped NaNs stay NaN (0 * NaN)


@pytest.mark.parametrize("kwargs,words", [
    (dict(rate=1.0, seed=1), ["rate", "[0, 1)"]),
    (dict(rate=-0.1, seed=1), ["rate", "[0, 1)"]),
    (dict(rate=0.5, seed=-1), ["seed", "2**64"]),
    (dict(rate=0.5, seed=2**64), ["seed", "2**64"]),
    (dict(rate=0.5, seed=1.5), ["seed", "integer"]),
    (dict(rate="half", seed=1), ["rate", "real number"]),
])
def test_bad_arguments_are_named(kwargs, words):
    with pytest.raises((ValueError, TypeError)) as err:
        dropout_forward(np.ones(8, np.float32), **kwargs)
    assert all(w in str(err.value) for w in words)


def test_out_must_not_overlap_x_partially():
    x = np.ones(16, np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        dropout_forward(x[:8], rate=0.5, seed=1, out=x[4:12])
