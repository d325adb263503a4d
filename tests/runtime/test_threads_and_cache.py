"""Thread count (library setting, per-model, applied to OpenMP) and the compile cache."""
from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import toolchain
from tensorforge.errors import TensorforgeError
from tensorforge.runtime.native import default_threads

from . import models


def _omp_max_threads(model) -> int:
    """What this thread's OpenMP will start next in ``model``'s library: tensorforge's runtime
    there (its own per-thread setting), else the libgomp the library uses."""
    try:
        fn = model.native.lib.tensorforge_omp_max_threads
    except AttributeError:
        fn = ctypes.CDLL(ctypes.util.find_library("gomp") or "libgomp.so.1").omp_get_max_threads
    fn.restype = ctypes.c_int
    return fn()


@pytest.fixture(scope="module")
def wide():
    return tensorforge.compile(models.wide_mlp())


def test_default_is_all_cores_and_compile_option_sets_it(wide, small):
    assert wide.threads == default_threads()
    assert small.threads == 1


def test_set_threads_reaches_openmp_and_keeps_results(wide):
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    results = []
    for n in (1, 3, 2):
        wide.set_threads(n)
        assert wide.native.library_threads() == n
        results.append(wide(x))
        assert _omp_max_threads(wide) == n        # tf_run applied it to the calling thread
    # each output element is computed by one thread in a fixed order: bitwise identical
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    wide.set_threads(default_threads())


def test_models_sharing_a_library_keep_their_own_thread_counts():
    a = tensorforge.compile(models.wide_mlp(), threads=1)
    b = tensorforge.compile(models.wide_mlp(), threads=2)
    assert a.native.lib._handle == b.native.lib._handle      # one library: one C-side setting
    x = np.ones((64, 256), np.float32)
    a(x)
    assert a.native.library_threads() == 1 and _omp_max_threads(a) == 1
    b(x)
    assert b.native.library_threads() == 2 and _omp_max_threads(b) == 2
    a(x)
    assert _omp_max_threads(a) == 1


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_bad_thread_counts_are_rejected(small, bad):
    with pytest.raises(TensorforgeError, match="threads must be a positive integer"):
        small.set_threads(bad)
    assert small.threads == 1


def test_second_compile_runs_no_compiler():
    module = models.wide_mlp(width=96)
    runs = toolchain.stats.compiler_runs
    first = tensorforge.compile(module, threads=1)
    assert toolchain.stats.compiler_runs == runs + 1 and first.native.build["origin"] == "compiled"
    second = tensorforge.compile(models.wide_mlp(width=96), threads=2)   # a fresh, equal module
    assert toolchain.stats.compiler_runs == runs + 1                     # threads do not change the code
    assert second.native.build["origin"] == "cache"
    assert second.native.library_path == first.native.library_path
    x = np.random.default_rng(1).standard_normal((64, 96)).astype(np.float32)
    np.testing.assert_array_equal(first(x), second(x))
