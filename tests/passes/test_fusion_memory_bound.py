"""The memory-bound fused kernels of benchmarks/fusion.py, compiled to C: what the kernels hold
(one kernel, one exponential per element, the inline vectorizable exp/erf) and their numerics
against float64 NumPy/math references.  Shapes are small versions of the benchmark's."""
import math

import numpy as np

import tensorforge
from tensorforge.ir import Module, tensor


def _module(shape, build) -> Module:
    m = Module()
    f = m.add_function("main", [tensor(shape)])
    f.set_return([build(f.builder().graph, f.args[0])])
    return m


def _kernels(source: str) -> str:
    """The kernel functions of a generated C file (after the prelude's inline helpers)."""
    body = source[source.index("static void"):]
    return body[:body.index("void tf_run(")]


def _softmax(g, v):
    return g.softmax(v, axis=-1)


def _softmax_written_out(g, v):
    e = g.exp(g.sub(v, g.reduce_max(v, axes=(-1,), keepdims=True)))
    return g.div(e, g.reduce_sum(e, axes=(-1,), keepdims=True))


def test_softmax_one_kernel_one_exp_per_element_either_way(rng):
    shape = (2, 3, 16, 128)
    x = (4 * rng.standard_normal(shape)).astype(np.float32)
    xd = x.astype(np.float64)
    want = np.exp(xd - xd.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    texts = []
    for build in (_softmax, _softmax_written_out):
        cm = tensorforge.compile(_module(shape, build), passes=False)
        assert cm.native.build["kernels"] == 1
        kernel = _kernels(cm.source)
        # the exponentials are computed once, into a row buffer that the sum and the output read
        assert kernel.count("tf_expf(") == 1 and "expf(" not in kernel.replace("tf_expf(", "")
        texts.append(kernel.split("(", 1)[1])            # the same kernel but for its name
        np.testing.assert_allclose(cm(x), want, rtol=2e-6, atol=1e-7)
    assert texts[0] == texts[1]


def test_softmax_masked_rows_give_exact_zeros(rng):
    x = rng.standard_normal((4, 128)).astype(np.float32)
    x[:, 64:] = -np.inf
    got = tensorforge.compile(_module(x.shape, _softmax), passes=False)(x)
    np.testing.assert_array_equal(got[:, 64:], 0.0)
    np.testing.assert_allclose(got[:, :64].sum(-1), 1.0, rtol=1e-6)


def test_layer_norm_gelu_residual_is_one_kernel_with_the_inline_gelu(rng):
    shape = (4, 8, 768)
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    shift = rng.standard_normal(shape[-1]).astype(np.float32)

    def build(g, v):
        ln = g.layer_norm(v, g.constant(scale), g.constant(shift), axis=-1, epsilon=1e-5)
        return g.add(g.gelu(ln), v)

    cm = tensorforge.compile(_module(shape, build), passes=False)
    assert cm.native.build["kernels"] == 1
    kernel = _kernels(cm.source)
    assert kernel.count("tf_geluf(") == 1 and "erf" not in kernel
    xd = x.astype(np.float64)
    y = (xd - xd.mean(-1, keepdims=True)) / np.sqrt(xd.var(-1, keepdims=True) + 1e-5) * scale + shift
    erf = np.vectorize(math.erf)
    want = xd + 0.5 * y * (1 + erf(y / math.sqrt(2)))
    np.testing.assert_allclose(cm(x), want, rtol=1e-5, atol=2e-5)
