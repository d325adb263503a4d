"""Shared test fixtures: seeded random generators and tolerance helpers."""
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    """Max relative error check with an absolute floor for values near zero."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
