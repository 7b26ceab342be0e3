"""The activations' in-place paths (out=x in the forward, out=dy in the backward) against the
out-of-place ones and PyTorch, on both sides of the parallel threshold, and with NaN."""

import numpy as np
import pytest
import torch

import kernels as K
from kernels._jit import PARALLEL_MIN


@pytest.mark.parametrize("name,torch_fn", [("relu", torch.relu), ("sigmoid", torch.sigmoid)])
@pytest.mark.parametrize("size", [37, 4 * PARALLEL_MIN + 5])
def test_in_place_matches_out_of_place_and_torch(name, torch_fn, size, rng):
    x = (rng.standard_normal(size) * 4).astype(np.float32)
    x[::97] = np.nan
    dy = rng.standard_normal(size).astype(np.float32)
    forward, backward = getattr(K, f"{name}_forward"), getattr(K, f"{name}_backward")
    y = forward(x)
    dx = backward(y, dy)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch_fn(xt)
    yt.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-6, atol=3e-7, equal_nan=True)
    finite = ~np.isnan(x)   # at a NaN input torch's relu passes dy on, ours (y > 0 is false) does not
    np.testing.assert_allclose(dx[finite], xt.grad.numpy()[finite], rtol=1e-5, atol=1e-6)

    y_in = x.copy()
    assert forward(y_in, out=y_in) is y_in
    np.testing.assert_array_equal(y_in, y)
    dx_in = dy.copy()
    assert backward(y, dx_in, out=dx_in) is dx_in
    np.testing.assert_array_equal(dx_in, dx)


def test_backward_may_write_over_y(rng):
    x, dy = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    y = K.relu_forward(x)
    expected = K.relu_backward(y, dy)
    assert K.relu_backward(y, dy, out=y) is y
    np.testing.assert_array_equal(y, expected)
