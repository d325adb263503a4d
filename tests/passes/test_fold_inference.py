"""fold-inference on random conv/GEMM graphs: BatchNorm, biases and scales vanish into the
weights and the interpreter's results stay the same (up to float32 rounding)."""
import numpy as np
import pytest

from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.passes.graph.fold_inference import bn_affine, channel_vector, fold_inference
from tests.filecheck_util import random_input


def _bn_params(g, rng, c):
    """scale, bias, mean, var as constants: varied, positive variances."""
    return [g.constant(rng.uniform(0.5, 1.5, c).astype(np.float32)),
            g.constant(rng.normal(0, 0.1, c).astype(np.float32)),
            g.constant(rng.normal(0, 0.1, c).astype(np.float32)),
            g.constant(rng.uniform(0.5, 1.5, c).astype(np.float32))]


def _names(m):
    return [op.name for op in m.main.body]


def _check_same(before, after, seed=0, rtol=2e-5):
    rng = np.random.default_rng(seed)
    inputs = [random_input(a.type, rng) for a in before.main.args]
    for w, g in zip(interpret(before, *inputs), interpret(after, *inputs)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max())


@pytest.mark.parametrize("groups,transpose,bias", [(1, False, False), (2, False, True), (4, False, False),
                                                   (1, True, True), (2, True, False)])
def test_conv_bn_scale_shift_fold_into_one_conv(groups, transpose, bias):
    rng = np.random.default_rng(groups * 10 + transpose)
    c, o = 4, 8
    m = Module()
    f = m.add_function("main", [tensor((2, c, 5, 5))])
    g = f.builder().graph
    wshape = (c, o // groups, 3, 3) if transpose else (o, c // groups, 3, 3)
    w = g.constant(rng.normal(0, 0.3, wshape).astype(np.float32))
    b = g.constant(rng.normal(0, 0.1, o).astype(np.float32)) if bias else None
    op = g.conv_transpose if transpose else g.conv
    y = op(f.args[0], w, b, groups=groups, pads=(1, 1, 1, 1), strides=(1, 1))
    y = g.batch_norm(y, *_bn_params(g, rng, o), epsilon=1e-3)
    y = g.mul(y, g.constant(rng.uniform(0.5, 2, (o, 1, 1)).astype(np.float32)))
    y = g.add(g.constant(np.float32(0.5)), y)
    f.set_return([g.relu(y)])
    verify(m)
    before = m.clone()
    stats = fold_inference(m)
    verify(m)
    names = _names(m)
    assert names.count("graph.conv_transpose" if transpose else "graph.conv") == 1
    assert not {"graph.batch_norm", "graph.mul", "graph.add"} & set(names), names
    assert stats.fired["bn-into-conv"] == 1
    _check_same(before, m)


def test_bn_after_shared_conv_is_decomposed_and_merges_with_the_next_scale():
    rng = np.random.default_rng(3)
    m = Module()
    f = m.add_function("main", [tensor((1, 3, 4, 4))])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(rng.normal(0, 0.5, (3, 3, 1, 1)).astype(np.float32)))
    z = g.batch_norm(y, *_bn_params(g, rng, 3))
    z = g.add(g.mul(z, g.constant(rng.uniform(0.5, 2, (3, 1, 1)).astype(np.float32))),
              g.constant(rng.normal(0, 1, (3, 1, 1)).astype(np.float32)))
    f.set_return([z, y])
    before = m.clone()
    stats = fold_inference(m)
    verify(m)
    names = _names(m)
    assert names.count("graph.mul") == 1 and names.count("graph.add") == 1 and "graph.batch_norm" not in names
    assert stats.fired["bn-decompose"] == 1 and stats.fired["mul-add-const"] >= 1
    _check_same(before, m)


@pytest.mark.parametrize("trans_b", [False, True])
def test_gemm_bias_bn_and_scale_fold(trans_b):
    rng = np.random.default_rng(int(trans_b))
    m = Module()
    f = m.add_function("main", [tensor((3, 5))])
    g = f.builder().graph
    w = rng.normal(0, 0.5, (6, 5) if trans_b else (5, 6)).astype(np.float32)
    y = g.gemm(f.args[0], g.constant(w), g.constant(rng.normal(0, 1, 6).astype(np.float32)),
               alpha=0.5, beta=2.0, trans_b=trans_b)
    y = g.add(y, g.constant(rng.normal(0, 1, (1, 6)).astype(np.float32)))
    y = g.batch_norm(y, *_bn_params(g, rng, 6))
    y = g.mul(y, g.constant(np.float32(3.0)))
    f.set_return([y])
    before = m.clone()
    fold_inference(m)
    verify(m)
    assert [n for n in _names(m) if n != "graph.constant"] == ["graph.gemm", "func.return"]
    gemm = next(op for op in m.main.body if op.name == "graph.gemm")
    assert gemm.attributes["beta"] == 1.0
    _check_same(before, m)


def test_bn_affine_matches_the_reference_and_channel_vector_rejects_spatial_constants():
    m = Module()
    f = m.add_function("main", [tensor((1, 2, 3, 3))])
    g = f.builder().graph
    params = [np.array(v, np.float32) for v in ([2, 0.5], [1, -1], [0.5, 1], [1, 4])]
    y = g.batch_norm(f.args[0], *[g.constant(p) for p in params], epsilon=0.0)
    a, t = bn_affine(y.op)
    np.testing.assert_allclose(a, [2, 0.25])
    np.testing.assert_allclose(t, [0, -1.25])
    assert channel_vector(np.ones((2, 1, 1)), 4, 2).shape == (2,)
    assert channel_vector(np.ones(()), 4, 2).tolist() == [1, 1]
    assert channel_vector(np.ones((2, 3, 1)), 4, 2) is None          # varies over a spatial dim
    assert channel_vector(np.ones((1, 2, 1, 1, 1)), 4, 2) is None    # would broadcast the rank up
