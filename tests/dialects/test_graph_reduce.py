"""graph.reduce_* / argmax / argmin / softmax / log_softmax / cumsum vs torch, shape rules, cost."""
import numpy as np
import pytest
import torch

from tensorforge.errors import IRError, ShapeError
from tensorforge.ir import tensor

from .nn_harness import assert_close, cost, rand, result_type, run

_TORCH_REDUCE = {
    "reduce_sum": lambda t, a, k: torch.sum(t, dim=a, keepdim=k),
    "reduce_mean": lambda t, a, k: torch.mean(t, dim=a, keepdim=k),
    "reduce_max": lambda t, a, k: torch.amax(t, dim=a, keepdim=k),
    "reduce_min": lambda t, a, k: torch.amin(t, dim=a, keepdim=k),
    "reduce_prod": lambda t, a, k: _prod(t, a, k),
}


def _prod(t, axes, keepdim):
    for a in sorted((a % t.ndim for a in axes), reverse=True):
        t = torch.prod(t, dim=a, keepdim=keepdim)
    return t


@pytest.mark.parametrize("op", sorted(_TORCH_REDUCE))
@pytest.mark.parametrize("axes,keepdims", [((1,), False), ((0, 2), True), ((-1, 0), False), ((), False),
                                           ((), True)])
def test_reductions_match_torch(rng, op, axes, keepdims):
    x = rand(rng, 3, 4, 5)
    y = run(op, x, axes=axes, keepdims=keepdims)
    torch_axes = axes or tuple(range(x.ndim))         # () reduces everything
    assert_close(y, _TORCH_REDUCE[op](torch.from_numpy(x), torch_axes, keepdims).numpy())


def test_integer_reductions(rng):
    x = rng.integers(-9, 9, (4, 6)).astype(np.int32)
    np.testing.assert_array_equal(run("reduce_sum", x, axes=(1,)), x.sum(axis=1))
    np.testing.assert_array_equal(run("reduce_max", x, axes=(0,)), x.max(axis=0))
    mean = run("reduce_mean", np.array([[1, 2], [-1, -2]], np.int64), axes=(1,))
    np.testing.assert_array_equal(mean, [1, -1])                   # truncates toward zero
    assert run("reduce_max", np.array([[True, False], [False, False]]), axes=(1,)).tolist() == [True, False]


def test_reduce_half_precision_accumulates_in_f32():
    x = np.full((4096,), 0.1, np.float16)
    y = run("reduce_sum", x)
    assert y.dtype == np.float16
    assert abs(float(y) - 409.6) < 0.5                            # a pure f16 running sum stalls at 256


def test_reduce_shapes_and_errors():
    assert result_type("reduce_sum", tensor(("N", 4, 5)), axes=(1,)) == tensor(("N", 5))
    assert result_type("reduce_mean", tensor((2, 3)), keepdims=True) == tensor((1, 1))
    with pytest.raises(ShapeError, match="axis 3 is out of range for rank 3") as e:
        result_type("reduce_sum", tensor((2, 3, 4)), axes=(3,))
    assert "graph.reduce_sum" in str(e.value)
    with pytest.raises(ShapeError, match="repeated axis"):
        result_type("reduce_max", tensor((2, 3)), axes=(1, -1))
    with pytest.raises(ShapeError, match="empty axis 1"):
        result_type("reduce_min", tensor((2, 0)), axes=(1,))
    with pytest.raises(ShapeError, match="numeric"):
        result_type("reduce_sum", tensor((2,), "i1"))


@pytest.mark.parametrize("op,fn", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_arg_reductions(rng, op, fn, axis, keepdims):
    x = rng.integers(0, 3, (4, 5, 6)).astype(np.float32)           # many ties
    y = run(op, x, axis=axis, keepdims=keepdims)
    assert y.dtype == np.int64
    first = fn(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(y, first)
    last = run(op, x, axis=axis, keepdims=keepdims, select_last_index=True)
    n = x.shape[axis]
    np.testing.assert_array_equal(last, n - 1 - fn(np.flip(x, axis), axis=axis, keepdims=keepdims))
    # ties exist, so the two must differ somewhere, and both point at an extreme value
    assert (last != first).any()
    ext = np.max if op == "argmax" else np.min
    picked = np.take_along_axis(x, last if keepdims else np.expand_dims(last, axis), axis)
    np.testing.assert_array_equal(picked, ext(x, axis=axis, keepdims=True))


def test_arg_reduction_shape_rules():
    assert result_type("argmax", tensor((2, "L", 7)), axis=2, keepdims=True) == tensor((2, "L", 1), "i64")
    with pytest.raises(ShapeError, match="axis -4 is out of range"):
        result_type("argmin", tensor((2, 3, 4)), axis=-4)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax_match_torch(rng, axis):
    x = rand(rng, 3, 4, 5) * 4
    t = torch.from_numpy(x)
    assert_close(run("softmax", x, axis=axis), torch.softmax(t, dim=axis).numpy(), rtol=1e-5, atol=1e-6)
    assert_close(run("log_softmax", x, axis=axis), torch.log_softmax(t, dim=axis).numpy(), rtol=1e-5, atol=1e-5)


def test_softmax_is_numerically_stable():
    x = np.array([[1e4, 1e4 - 1, -1e4], [-1e30, -1e30, -1e30]], np.float32)
    s = run("softmax", x)
    ls = run("log_softmax", x)
    assert np.isfinite(s).all() and np.isfinite(ls).all()
    e = np.exp([0.0, -1.0])
    assert_close(s[0, :2], e / e.sum(), rtol=1e-6)
    assert_close(s[1], np.full(3, 1 / 3, np.float32), rtol=1e-6)
    assert_close(ls[0, :2], np.log(e / e.sum()), rtol=1e-6)


def test_softmax_rejects_integers():
    with pytest.raises(ShapeError, match="floating point") as e:
        result_type("softmax", tensor((4,), "i32"))
    assert "graph.softmax" in str(e.value)


def _cumsum_reference(x, axis, exclusive, reverse):
    """Straight from the definition, one output index at a time."""
    x = np.moveaxis(x, axis, -1)
    out = np.zeros_like(x)
    n = x.shape[-1]
    for i in range(n):
        idx = range(i + 1, n) if reverse else range(0, i)
        if not exclusive:
            idx = list(idx) + [i]
        for j in idx:
            out[..., i] += x[..., j]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, -1])
def test_cumsum(rng, exclusive, reverse, axis):
    x = rng.integers(-5, 5, (3, 4)).astype(np.int64)
    y = run("cumsum", x, axis=axis, exclusive=exclusive, reverse=reverse)
    np.testing.assert_array_equal(y, _cumsum_reference(x, axis, exclusive, reverse))
    xf = rand(rng, 3, 4)
    assert_close(run("cumsum", xf, axis=axis, exclusive=exclusive, reverse=reverse),
                 _cumsum_reference(xf, axis, exclusive, reverse))
    if not exclusive and not reverse:
        assert_close(run("cumsum", xf, axis=axis), torch.cumsum(torch.from_numpy(xf), dim=axis).numpy())


def test_cumsum_needs_axis():
    with pytest.raises(IRError, match="missing required attribute 'axis'"):
        result_type("cumsum", tensor((3,)))


def test_reduction_costs():
    assert cost("reduce_sum", tensor((8, 16)), axes=(1,)).flops == 128
    c = cost("softmax", tensor((4, 10)))
    assert c.flops == 5 * 40 and c.bytes == 2 * 40 * 4
