"""graph.matmul / batch_matmul / gemm: interpreter vs torch, shape rules, cost."""
import numpy as np
import pytest
import torch

from tensorforge.errors import IRError, ShapeError
from tensorforge.ir import tensor

from .nn_harness import assert_close, cost, rand, result_type, run


@pytest.mark.parametrize("a_shape,b_shape", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 1, 3, 4), (5, 4, 6)), ((7, 3, 4), (4, 2)), ((1, 4), (2, 3, 4, 5)),
])
def test_matmul_matches_torch(rng, a_shape, b_shape):
    a, b = rand(rng, *a_shape), rand(rng, *b_shape)
    assert_close(run("matmul", a, b), torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy())


def test_matmul_integers_are_exact(rng):
    a = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    b = rng.integers(-50, 50, (4, 2)).astype(np.int32)
    y = run("matmul", a, b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32))


def test_matmul_symbolic_dims():
    assert result_type("matmul", tensor(("B", 3, 4)), tensor((4, "N"))) == tensor(("B", 3, "N"))
    # a symbolic contraction dim matches a static one (checked at run time)
    assert result_type("matmul", tensor((2, "K")), tensor((8, 5))) == tensor((2, 5))


@pytest.mark.parametrize("a,b,needle", [
    ((3, 4), (5, 6), "contraction dim"),
    ((2, 3, 4), (3, 4, 5), "do not broadcast"),
    ((), (4,), "rank >= 1"),
])
def test_matmul_shape_errors_name_the_op(a, b, needle):
    with pytest.raises(ShapeError, match=needle) as e:
        result_type("matmul", tensor(a), tensor(b))
    assert "graph.matmul" in str(e.value)


def test_matmul_rejects_mixed_dtypes():
    with pytest.raises(ShapeError, match="element types differ"):
        result_type("matmul", tensor((2, 3)), tensor((3, 2), "f64"))


def test_batch_matmul_matches_torch(rng):
    a, b = rand(rng, 3, 4, 5), rand(rng, 3, 5, 2)
    assert_close(run("batch_matmul", a, b), torch.bmm(torch.from_numpy(a), torch.from_numpy(b)).numpy())


@pytest.mark.parametrize("a,b,needle", [
    ((4, 5), (5, 2), "rank 3"),
    ((3, 4, 5), (2, 5, 2), "batch dim 0"),
    ((3, 4, 5), (3, 4, 2), "contraction dim"),
    ((1, 4, 5), (3, 5, 2), "batch dim 0"),     # no broadcasting, unlike matmul
])
def test_batch_matmul_shape_errors(a, b, needle):
    with pytest.raises(ShapeError, match=needle) as e:
        result_type("batch_matmul", tensor(a), tensor(b))
    assert "graph.batch_matmul" in str(e.value)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 1), (1, 5), (3, 5), ()])
def test_gemm_matches_torch_addmm(rng, trans_a, trans_b, c_shape):
    a = rand(rng, *((4, 3) if trans_a else (3, 4)))
    b = rand(rng, *((5, 4) if trans_b else (4, 5)))
    alpha, beta = 0.7, -1.3
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    ta, tb = (ta.T if trans_a else ta), (tb.T if trans_b else tb)
    if c_shape is None:
        y = run("gemm", a, b, alpha=alpha, trans_a=trans_a, trans_b=trans_b)
        expected = alpha * (ta @ tb)
    else:
        c = rand(rng, *c_shape)
        y = run("gemm", a, b, c, alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
        expected = torch.addmm(torch.from_numpy(c).expand(3, 5), ta, tb, beta=beta, alpha=alpha)
    assert_close(y, expected.numpy())


def test_gemm_matches_onnxruntime(rng):
    from .nn_harness import ort_run
    a, b, c = rand(rng, 6, 3), rand(rng, 4, 6), rand(rng, 4)
    y = run("gemm", a, b, c, alpha=2.0, beta=0.5, trans_a=True, trans_b=True)
    assert_close(y, ort_run("Gemm", {"a": a, "b": b, "c": c}, alpha=2.0, beta=0.5, transA=1, transB=1))


@pytest.mark.parametrize("a,b,c,attrs,needle", [
    ((3, 4), (5, 6), None, {}, "contraction dim"),
    ((4, 3), (4, 5), None, {}, "contraction dim"),           # needs trans_a
    ((3, 4, 1), (4, 5), None, {}, "rank 2"),
    ((3, 4), (4, 5), (4, 5), {}, "does not broadcast to"),   # c is (M, N)-unidirectional
    ((3, 4), (4, 5), (2, 3, 5), {}, "rank <= 2"),
])
def test_gemm_shape_errors(a, b, c, attrs, needle):
    types = [tensor(a), tensor(b)] + ([tensor(c)] if c else [])
    with pytest.raises(ShapeError, match=needle) as e:
        result_type("gemm", *types, **attrs)
    assert "graph.gemm" in str(e.value)


def test_gemm_rejects_unknown_attribute():
    with pytest.raises(IRError, match="unknown attribute 'transA'"):
        result_type("gemm", tensor((3, 4)), tensor((4, 5)), transA=True)


def test_contraction_costs():
    c = cost("matmul", tensor((2, 3, 4)), tensor((4, 5)))
    assert c.flops == 2 * 2 * 3 * 5 * 4
    assert c.bytes == (24 + 20 + 30) * 4
    assert cost("matmul", tensor((4,)), tensor((4,))).flops == 8
    assert cost("batch_matmul", tensor((6, 32, 64)), tensor((6, 64, 16))).flops == 2 * 6 * 32 * 16 * 64
    # gemm: 2MNK plus alpha scaling (MN) plus beta*c add (2MN, beta != 1)
    g = cost("gemm", tensor((64, 128)), tensor((256, 128)), tensor((256,)), trans_b=True, alpha=0.5, beta=2.0)
    assert g.flops == 2 * 64 * 256 * 128 + 64 * 256 + 2 * 64 * 256
    assert g.bytes == (64 * 128 + 256 * 128 + 256 + 64 * 256) * 4
    assert cost("gemm", tensor((8, 4)), tensor((4, 2)), tensor((2,))).flops == 2 * 8 * 2 * 4 + 8 * 2
