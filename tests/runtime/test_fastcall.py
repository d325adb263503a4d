"""The C call path (runtime/fastcall.py): same results as the Python path, the Python path for
everything it does not take, threads applied, no reference cycle, and concurrent callers."""
from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import TensorforgeError
from tensorforge.runtime import fastcall

from . import models

pytestmark = pytest.mark.skipif(fastcall.extension() is None and fastcall.enabled(),
                                reason=f"the C call path cannot be built here: {fastcall.failure()}")


def _python_path(cm, *inputs):
    return cm.native.call_python(inputs)


def test_small_static_models_take_the_c_path(small):
    assert small.native.uses_fast_call


def test_results_equal_the_python_path_and_the_reference(small):
    for seed in range(3):
        x, b = models.inputs(seed)
        got = small(x, b)
        want = _python_path(small, x, b)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w, r in zip(got, want, models.reference(x, b)):
            assert type(g) is np.ndarray and g.dtype == np.float32 and g.shape == (4, 16)
            assert g.flags.c_contiguous and g.flags.writeable and g.flags.owndata
            np.testing.assert_array_equal(g, w)
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    a, _ = small(*models.inputs(0))
    b2, _ = small(*models.inputs(0))
    assert a is not b2 and not np.shares_memory(a, b2)     # each call its own outputs


def test_torch_in_gives_torch_out_through_the_c_path(small):
    torch = pytest.importorskip("torch")
    x, b = models.inputs(4)
    tx, tb = torch.from_numpy(x), torch.from_numpy(b)
    first = small(tx, tb)            # may take the Python path once: it tells the C path about torch
    got = small(tx, tb)
    for g, f, r in zip(got, first, models.reference(x, b)):
        assert isinstance(g, torch.Tensor) and g.dtype == torch.float32 and tuple(g.shape) == (4, 16)
        np.testing.assert_array_equal(g.numpy(), f.numpy())
        np.testing.assert_allclose(g.numpy(), r, rtol=1e-4, atol=1e-5)
    # mixed: one NumPy, one torch input still gives torch out
    mixed = small(x, tb)
    assert isinstance(mixed[0], torch.Tensor)
    np.testing.assert_array_equal(mixed[0].numpy(), got[0].numpy())


def test_inputs_the_c_path_does_not_take_fall_back_with_the_same_results_and_errors(small):
    x, b = models.inputs(5)
    want = small(x, b)[0]
    variants = [np.asfortranarray(x), x.tolist(), np.repeat(x, 2, axis=1)[:, ::2]]
    for v in variants:
        np.testing.assert_array_equal(small(v, b)[0], want)
    with pytest.raises(TensorforgeError, match="dtype >f4"):       # float32, but not native byte order
        small(x.astype(">f4"), b)
    with pytest.raises(TensorforgeError, match="dtype float64"):
        small(x.astype(np.float64), b)
    with pytest.raises(TensorforgeError, match="shape"):
        small(np.zeros((4, 9), np.float32), b)
    with pytest.raises(TensorforgeError, match="2 input"):
        small(x)


def test_torch_inputs_the_c_path_does_not_take_fall_back(small):
    torch = pytest.importorskip("torch")
    x, b = models.inputs(6)
    want = small(x, b)[0]
    tx = torch.from_numpy(np.ascontiguousarray(x.T)).T         # not contiguous: copied
    np.testing.assert_array_equal(small(tx, torch.from_numpy(b))[0].numpy(), want)
    param = torch.nn.Parameter(torch.from_numpy(x.copy()))      # a Tensor subclass
    np.testing.assert_array_equal(small(param, torch.from_numpy(b))[0].detach().numpy(), want)
    with pytest.raises(TensorforgeError, match="torch.float64"):
        small(torch.from_numpy(x).double(), torch.from_numpy(b))


def test_threads_follow_set_threads(private_cache):
    cm = tensorforge.compile(models.wide_mlp(), threads=1)
    assert cm.native.uses_fast_call
    x = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32)
    ref = cm(x)
    for n in (2, 1, 3):
        cm.set_threads(n)
        np.testing.assert_allclose(cm(x), ref, rtol=1e-5, atol=1e-5)
        assert cm.native.library_threads() == n


def test_models_sharing_a_library_apply_their_own_threads(private_cache):
    one = tensorforge.compile(models.wide_mlp(), threads=1)
    two = tensorforge.compile(models.wide_mlp(), threads=2)
    assert one.native.lib is two.native.lib
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    one(x)
    assert one.native.library_threads() == 1
    two(x)
    assert two.native.library_threads() == 2
    one.native.call_python((x,))      # the Python path sees what the C path applied
    assert one.native.library_threads() == 1


def test_a_dropped_model_is_freed_at_once(private_cache):
    cm = tensorforge.compile(models.two_in_two_out(), threads=1)
    cm(*models.inputs(0))
    ref = weakref.ref(cm.native)
    gc.disable()
    try:
        del cm
        assert ref() is None          # no reference cycle through the C caller
    finally:
        gc.enable()


def test_concurrent_callers_get_their_own_results(small):
    cases = [models.inputs(s) for s in range(8)]
    want = [models.reference(x, b)[0] for x, b in cases]
    errors: list = []

    def worker(k):
        try:
            for _ in range(200):
                i = (k * 3 + _) % len(cases)
                np.testing.assert_allclose(small(*cases[i])[0], want[i], rtol=1e-4, atol=1e-5)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors[0]


def test_pooled_outputs_and_dynamic_models_keep_the_python_path(private_cache):
    cm = tensorforge.compile(models.two_in_two_out(), threads=1)
    assert cm.native.uses_fast_call
    cm.native.pool_min_bytes = 64               # the (4, 16) f32 outputs now come from the pool
    assert not cm.native.uses_fast_call
    x, b = models.inputs(7)
    np.testing.assert_allclose(cm(x, b)[0], models.reference(x, b)[0], rtol=1e-4, atol=1e-5)
    cm.native.pool_min_bytes = 1 << 16
    assert cm.native.uses_fast_call


def test_the_environment_switch_turns_it_off(private_cache, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_FASTCALL", "0")
    cm = tensorforge.compile(models.two_in_two_out(), threads=1)
    assert not cm.native.uses_fast_call
    x, b = models.inputs(8)
    np.testing.assert_allclose(cm(x, b)[0], models.reference(x, b)[0], rtol=1e-4, atol=1e-5)


def test_without_a_compiler_or_headers_the_python_path_runs(private_cache, monkeypatch):
    """A deployment machine without Python.h or a C compiler: no C path, same results, no error."""
    def no_headers(out):
        raise ImportError("no Python.h under '/nowhere' (install the Python development headers)")

    monkeypatch.setattr(fastcall, "_module", None)
    monkeypatch.setattr(fastcall, "_failure", None)
    monkeypatch.setattr(fastcall, "_library_name", lambda: "never-built.so")
    monkeypatch.setattr(fastcall, "_build", no_headers)
    cm = tensorforge.compile(models.two_in_two_out(), threads=1)
    assert not cm.native.uses_fast_call and "Python.h" in fastcall.failure()
    x, b = models.inputs(9)
    np.testing.assert_allclose(cm(x, b)[0], models.reference(x, b)[0], rtol=1e-4, atol=1e-5)
