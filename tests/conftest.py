"""Shared test fixtures: seeded random generators and tolerance helpers.

``tensorforge.compile`` applies the default tuning database when one exists; the tests must not
depend on what a developer has tuned on this machine, so the default points at a file that does
not exist (tests that use a database pass their own ``db=``).
"""
import os

import numpy as np
import pytest

os.environ["TENSORFORGE_TUNE_DB"] = os.path.join(os.path.dirname(__file__), ".no-such-tuning-db", "tuning.sqlite")


AMX = "amx_tile,amx_int8,amx_bf16"


def _without(features: str):
    """This host as a target without ``features`` (``TENSORFORGE_CPU_FEATURES_OFF``) while it yields."""
    from tensorforge.codegen import target
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORFORGE_CPU_FEATURES_OFF", features)
        target._host.cache_clear()
        yield
    target._host.cache_clear()


def _without_amx():
    yield from _without(AMX)


@pytest.fixture(scope="module")
def host_without_amx():
    """This host as a target without its AMX features (``TENSORFORGE_CPU_FEATURES_OFF``), for a
    whole test module: for tests of the AVX-512 VNNI int8 kernels that an AMX host would not pick
    (the direct convolution, the int8 tuner's Tiling knob).  The same on hosts without AMX."""
    yield from _without_amx()


@pytest.fixture
def one_test_without_amx():
    """``host_without_amx`` for one test: the bf16 vector kernels (whose bits are their contract)
    and the bf16 Winograd path, which an AMX host would not pick."""
    yield from _without_amx()


@pytest.fixture
def host_without_vnni():
    """This host as a target without VNNI or AMX for one test: what a CPU with AVX2 only (AMD Zen 3)
    builds, the int8 kernels' portable loop, on any host."""
    yield from _without(AMX + ",avx512_vnni,avx_vnni")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    """Max relative error check with an absolute floor for values near zero."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
