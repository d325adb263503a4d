"""graph.layer_norm / batch_norm / group_norm / instance_norm vs torch.nn.functional, shape rules."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensorforge.errors import ShapeError
from tensorforge.ir import FusionKind, lookup, tensor

from .nn_harness import assert_close, cost, rand, result_type, run


def _t(a):
    return torch.from_numpy(a)


@pytest.mark.parametrize("axis", [-1, 1, -2, 2])
def test_layer_norm_matches_torch(rng, axis):
    x = rand(rng, 2, 3, 4, 5) * 3 + 7                    # offset mean: tests the two-pass variance
    normalized = x.shape[axis % x.ndim:]
    scale, bias = rand(rng, *normalized), rand(rng, *normalized)
    y = run("layer_norm", x, scale, bias, axis=axis, epsilon=1e-3)
    assert_close(y, F.layer_norm(_t(x), normalized, _t(scale), _t(bias), eps=1e-3).numpy())


def test_layer_norm_optional_operands_and_broadcast_scale(rng):
    x = rand(rng, 4, 6, 8)
    assert_close(run("layer_norm", x), F.layer_norm(_t(x), (8,)).numpy())
    scale = rand(rng, 8)                                   # broadcast over the normalised (6, 8)
    y = run("layer_norm", x, scale, axis=1)
    assert_close(y, (F.layer_norm(_t(x), (6, 8)) * _t(scale)).numpy())


def test_layer_norm_errors():
    with pytest.raises(ShapeError, match="scale of shape \\(6,\\) does not broadcast to the normalised") as e:
        result_type("layer_norm", tensor((4, 6, 8)), tensor((6,)))
    assert "graph.layer_norm" in str(e.value)
    with pytest.raises(ShapeError, match="axis 3 is out of range"):
        result_type("layer_norm", tensor((4, 6, 8)), axis=3)
    with pytest.raises(ShapeError, match="floating point"):
        result_type("layer_norm", tensor((4, 8), "i32"))
    assert result_type("layer_norm", tensor(("B", "S", 768)), tensor((768,)), tensor((768,))) == \
        tensor(("B", "S", 768))


def test_batch_norm_matches_torch(rng):
    x = rand(rng, 2, 5, 4, 3)
    scale, bias, mean = rand(rng, 5), rand(rng, 5), rand(rng, 5)
    var = np.abs(rand(rng, 5)) + 0.1
    y = run("batch_norm", x, scale, bias, mean, var, epsilon=1e-3)
    expected = F.batch_norm(_t(x), _t(mean), _t(var), _t(scale), _t(bias), training=False, eps=1e-3)
    assert_close(y, expected.numpy())
    x2 = rand(rng, 3, 5)                                   # (N, C): batch norm after a linear layer
    assert_close(run("batch_norm", x2, scale, bias, mean, var),
                 F.batch_norm(_t(x2), _t(mean), _t(var), _t(scale), _t(bias), training=False).numpy())


def test_batch_norm_is_per_channel_affine():
    assert lookup("graph.batch_norm").fusion is FusionKind.BROADCAST
    assert lookup("graph.layer_norm").fusion is FusionKind.REDUCTION
    with pytest.raises(ShapeError, match="var has 4 values but x has 5 channels") as e:
        result_type("batch_norm", tensor((1, 5, 2, 2)), *[tensor((5,))] * 3, tensor((4,)))
    assert "graph.batch_norm" in str(e.value)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_matches_torch(rng, groups):
    x = rand(rng, 2, 6, 4, 5) + 2
    scale, bias = rand(rng, 6), rand(rng, 6)
    y = run("group_norm", x, scale, bias, num_groups=groups, epsilon=1e-4)
    assert_close(y, F.group_norm(_t(x), groups, _t(scale), _t(bias), eps=1e-4).numpy())


def test_group_norm_errors():
    with pytest.raises(ShapeError, match="channels \\(dim 1 of x\\) = 6 are not divisible by num_groups = 4"):
        result_type("group_norm", tensor((1, 6, 4)), tensor((6,)), tensor((6,)), num_groups=4)
    with pytest.raises(ShapeError, match="scale has 3 values but x has 6 channels"):
        result_type("group_norm", tensor((1, 6, 4)), tensor((3,)), tensor((6,)), num_groups=3)


def test_instance_norm_matches_torch(rng):
    x = rand(rng, 2, 3, 5, 4)
    scale, bias = rand(rng, 3), rand(rng, 3)
    y = run("instance_norm", x, scale, bias, epsilon=1e-5)
    assert_close(y, F.instance_norm(_t(x), weight=_t(scale), bias=_t(bias), eps=1e-5).numpy())
    with pytest.raises(ShapeError, match="rank >= 3"):
        result_type("instance_norm", tensor((2, 3)), tensor((3,)), tensor((3,)))


def test_norm_costs():
    assert cost("batch_norm", tensor((1, 4, 2, 2)), *[tensor((4,))] * 4).flops == 2 * 16
    assert cost("layer_norm", tensor((2, 8))).flops == 8 * 16
