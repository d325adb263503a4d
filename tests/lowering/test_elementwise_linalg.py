"""Elementwise and matmul lowerings through every level."""
import numpy as np
import pytest

from tests.lowering.harness import check_op

R = np.random.default_rng(0)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("name", ["graph.exp", "graph.tanh", "graph.sigmoid", "graph.relu", "graph.erf",
                                  "graph.neg", "graph.abs", "graph.silu", "graph.softplus"])
def test_unary(name):
    check_op(name, [f32(3, 17)])


def test_gelu_both_forms():
    check_op("graph.gelu", [f32(4, 9)])
    check_op("graph.gelu", [f32(4, 9)], approximate="tanh")


def test_clip_and_leaky():
    check_op("graph.clip", [f32(5, 6)], min=0.0, max=6.0)
    check_op("graph.leaky_relu", [f32(5, 6)], alpha=0.1)


@pytest.mark.parametrize("name", ["graph.add", "graph.sub", "graph.mul", "graph.div", "graph.max", "graph.min"])
def test_binary_broadcast(name):
    check_op(name, [f32(2, 3, 5), f32(3, 1)])


def test_compare_select():
    a, b = f32(4, 5), f32(5)
    check_op("graph.lt", [a, b])
    check_op("graph.select", [a > 0, a, b])


def test_cast_and_int_math():
    check_op("graph.cast", [f32(3, 4) * 10], dtype="i32")
    ints = R.integers(-20, 20, (3, 4)).astype(np.int64)
    divs = R.integers(1, 5, (3, 4)).astype(np.int64) * np.where(R.random((3, 4)) > 0.5, 1, -1)
    check_op("graph.div", [ints, divs])
    check_op("graph.mod", [ints, divs])


@pytest.mark.parametrize("sa,sb", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((7,), (7, 3)), ((2, 1, 5, 7), (3, 7, 4)),
                                   ((5, 7), (7,))])
def test_matmul_shapes(sa, sb):
    check_op("graph.matmul", [f32(*sa), f32(*sb)])


def test_gemm_with_bias_and_transposes():
    check_op("graph.gemm", [f32(7, 5), f32(3, 7), f32(3)], const_inputs=[1, 2], trans_a=True, trans_b=True,
             alpha=0.5, beta=2.0)
