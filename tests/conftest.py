import ctypes

import numpy as np
import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.load_profile("ci")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def f32(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


M_PERTURB = -6   # glibc's mallopt parameter (malloc.h)


@pytest.fixture
def dirty_malloc():
    """While the test runs, glibc fills each block malloc hands out (numba's np.empty inside a
    kernel included) with 0x7f bytes, each float32 ~3.4e38: scratch a kernel forgets to zero
    shows in its output on every run, not only when the heap happens to be dirty."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        pytest.skip("no glibc mallopt: scratch memory cannot be made dirty on purpose")
    if not mallopt(M_PERTURB, 0x7F ^ 0xFF):   # glibc stores the byte xor 0xff
        pytest.skip("mallopt(M_PERTURB) refused")
    try:
        yield
    finally:
        mallopt(M_PERTURB, 0)
