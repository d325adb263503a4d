"""Native code keeps the numerics the ONNX conformance suite checks, under ``-ffast-math``.

Each test is a regression for a conformance case that failed natively: half-precision sums
(Attention fp16), NaN/Inf tests (IsNaN, IsInf), a quotient rounded to an integer
(DynamicQuantizeLinear) and bf16 tensors (Cast, Celu, Attention bf16).  References are NumPy.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorforge
from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.ir.types import DType


def _module(arg_types, body):
    m = Module()
    f = m.add_function("main", arg_types)
    b = f.builder()
    f.set_return(list(body(b, *f.args)))
    verify(m)
    return m


def _native(m, *inputs):
    outs = tensorforge.compile(m)(*inputs)
    return outs if isinstance(outs, tuple) else (outs,)


def test_f16_sums_accumulate_in_f32(rng):
    """reduce_sum and matmul in f16 round the running sum once, at the end (as NumPy does)."""
    ones = np.ones((4096,), np.float16)          # an f16 running sum stalls at 2048
    m = _module([tensor((4096,), DType.f16)], lambda b, x: [b.graph.reduce_sum(x, axes=(0,), keepdims=False)])
    (total,) = _native(m, ones)
    assert total.dtype == np.float16 and float(total) == 4096.0

    a = rng.uniform(-1, 1, (4, 256)).astype(np.float16)
    w = rng.uniform(-1, 1, (256, 8)).astype(np.float16)
    m = _module([tensor(a.shape, DType.f16), tensor(w.shape, DType.f16)], lambda b, x, y: [b.graph.matmul(x, y)])
    (got,) = _native(m, a, w)
    want = (a.astype(np.float32) @ w.astype(np.float32)).astype(np.float16)
    # one f16 rounding of the exact sum: at most 1 ulp from NumPy's float-accumulated result
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2 ** -10, atol=2 ** -14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nan_and_inf_tests_survive_fast_math(dtype):
    """``x != x`` and ``x == inf`` (how ONNX IsNaN/IsInf import) are not folded away."""
    x = np.array([0.0, np.nan, np.inf, -np.inf, 1.5, -0.0], dtype)
    t = tensor(x.shape, DType.from_np(np.dtype(dtype)))

    def body(b, v):
        inf = b.graph.constant(np.array(np.inf, dtype))
        ninf = b.graph.constant(np.array(-np.inf, dtype))
        return [b.graph.ne(v, v), b.graph.eq(v, inf), b.graph.eq(v, ninf), b.graph.lt(v, inf),
                b.graph.ge(v, ninf), b.graph.eq(v, v)]
    got = _native(_module([t], body), x)
    want = [x != x, x == np.inf, x == -np.inf, x < np.inf, x >= -np.inf, x == x]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_quotient_rounded_to_integer_is_exact():
    """round(x / (a * c)) with a quotient just under .5: fast-math's reciprocal would round it up."""
    x = np.array([0.0, 2.0, -3.0, -2.5, 1.34, 0.5], np.float32)
    span = np.array(5.0, np.float32)
    inv = np.float32(1 / 255)

    def body(b, v, a):
        scale = b.graph.mul(a, b.graph.constant(np.array(inv)))
        return [b.graph.round(b.graph.div(v, scale))]
    (got,) = _native(_module([tensor(x.shape), tensor(())], body), x, span)
    np.testing.assert_array_equal(got, np.rint(x / (span * inv)))   # -2.5 / scale = -127.49999 -> -127


def test_bf16_runs_natively_as_the_interpreter_does(rng):
    """bf16 tensors compute in f32 and round only at casts to bf16; the library takes f32 arrays."""
    x = rng.standard_normal((3, 5)).astype(np.float32)
    xb = interpret(_module([tensor(x.shape)], lambda b, v: [b.graph.cast(v, dtype=DType.bf16)]), x)[0]

    def body(b, v, w):
        s = b.graph.add(b.graph.exp(v), b.graph.constant(np.array(0.1, np.float32), dtype=DType.bf16))
        return [s, b.graph.cast(w, dtype=DType.bf16), b.graph.cast(s, dtype=DType.f32)]
    m = _module([tensor(x.shape, DType.bf16), tensor(x.shape)], body)
    ref = interpret(m, xb, x)
    got = _native(m, xb, x)
    for g, r in zip(got, ref):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=0)
    np.testing.assert_array_equal(got[1], ref[1])       # rounding to bf16 is bit-exact
    assert np.array_equal(got[1].view(np.uint32) & 0xFFFF, np.zeros(x.shape, np.uint32))


def test_softmax_of_a_pooled_row_with_huge_equal_logits_stays_normalised():
    """global average pool + softmax fused into one kernel: the pooled value (a sum divided by
    the window size) is read by the row maximum and by the exponentials.  Recomputed in each loop
    it rounded differently under -ffast-math, every x came out an ulp (512 at 4.3e9) below the
    max, all exponentials underflowed and the softmax was 0/0 = NaN (squeezenet with random
    weights).  Kept in one buffer, the row sums to 1 and matches NumPy's reference."""
    rng = np.random.default_rng(0)
    x = (4.3e9 + rng.standard_normal((1, 1000, 13, 13)) * 30).astype(np.float32)
    m = _module([tensor(x.shape, DType.f32)],
                lambda b, a: [b.graph.softmax(b.graph.global_avg_pool(a), axis=1)])
    (out,) = _native(m, x)
    assert np.isfinite(out).all()
    assert abs(float(out.sum()) - 1.0) < 1e-5
    pooled = x.astype(np.float64).mean(axis=(2, 3))
    assert out.ravel().argmax() in set(np.flatnonzero(pooled.ravel() >= pooled.max() - 1024))
