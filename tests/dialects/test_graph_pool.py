"""graph.max_pool / avg_pool / global pools: interpreter vs onnxruntime (ONNX semantics incl.
ceil_mode and count_include_pad), shape rules, cost."""
import numpy as np
import pytest

from tensorforge.errors import IRError, ShapeError
from tensorforge.ir import tensor

from .nn_harness import assert_close, cost, ort_run, rand, result_type, run, set_attr_and_verify

# (x shape, kernel, strides, pads): ceil mode adds a partial window in several of these, and in
# (1, 2, 5, 5)/k3/s3/p1 ceil mode's extra window would start in the end padding (so it is dropped).
_CASES = [
    ((1, 2, 7, 8), (3, 3), (2, 2), (1, 1, 1, 1)),
    ((2, 2, 7, 8), (3, 2), (2, 3), (1, 0, 0, 1)),
    ((1, 2, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((1, 2, 5, 5), (3, 3), (3, 3), (1, 1, 1, 1)),
    ((1, 3, 9), (4,), (3,), (2, 1)),
    ((1, 2, 5, 6), (3, 3), (2, 2), (1, 0, 2, 1)),
    ((1, 1, 5, 6, 7), (2, 3, 2), (2, 2, 3), (1, 1, 0, 0, 1, 1)),
]


@pytest.mark.parametrize("x_shape,kernel,strides,pads", _CASES)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool_matches_onnxruntime(rng, x_shape, kernel, strides, pads, ceil_mode, count_include_pad):
    x = rand(rng, *x_shape)
    y = run("avg_pool", x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
            count_include_pad=count_include_pad)
    expected = ort_run("AveragePool", {"x": x}, kernel_shape=kernel, strides=strides, pads=pads,
                       ceil_mode=int(ceil_mode), count_include_pad=int(count_include_pad))
    assert_close(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x_shape,kernel,strides,pads", _CASES)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("dilation", [1, 2])
def test_max_pool_matches_onnxruntime(rng, x_shape, kernel, strides, pads, ceil_mode, dilation):
    x = rand(rng, *x_shape)
    dil = (dilation,) * len(kernel)
    y = run("max_pool", x, kernel=kernel, strides=strides, pads=pads, dilations=dil, ceil_mode=ceil_mode)
    expected = ort_run("MaxPool", {"x": x}, kernel_shape=kernel, strides=strides, pads=pads, dilations=dil,
                       ceil_mode=int(ceil_mode))
    np.testing.assert_array_equal(y, expected)


def test_max_pool_padding_never_wins(rng):
    x = -np.abs(rand(rng, 1, 1, 4, 4)) - 1.0                           # every value < 0
    y = run("max_pool", x, kernel=(3, 3), pads=(2, 2, 2, 2), strides=(2, 2))
    assert (y < 0).all()
    xi = rng.integers(-100, -1, (1, 2, 5, 5)).astype(np.int8)
    yi = run("max_pool", xi, kernel=(2, 2), pads=(1, 1, 1, 1), strides=(2, 2))
    assert yi.dtype == np.int8
    assert yi[0, 0, 0, 0] == xi[0, 0, 0, 0]                      # corner window: 1 real element
    assert yi[0, 1, 2, 2] == xi[0, 1, 3:, 3:].max()                # last window: rows/cols 3..4


def test_avg_pool_known_values():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    y = run("avg_pool", x, kernel=(2, 2), strides=(2, 2))
    np.testing.assert_array_equal(y[0, 0], [[2.5, 4.5], [10.5, 12.5]])
    # corner window with pads: count_include_pad divides by 4 (the padded 2x2), otherwise by 1
    assert run("avg_pool", x, kernel=(2, 2), pads=(1, 1, 0, 0), count_include_pad=True)[0, 0, 0, 0] == 0.0
    ones = np.ones((1, 1, 3, 3), np.float32)
    assert run("avg_pool", ones, kernel=(2, 2), pads=(1, 1, 1, 1), count_include_pad=True)[0, 0, 0, 0] == 0.25
    assert run("avg_pool", ones, kernel=(2, 2), pads=(1, 1, 1, 1))[0, 0, 0, 0] == 1.0


def test_global_pools(rng):
    x = rand(rng, 2, 3, 5, 4)
    assert_close(run("global_avg_pool", x), x.mean(axis=(2, 3), keepdims=True))
    np.testing.assert_array_equal(run("global_max_pool", x), x.max(axis=(2, 3), keepdims=True))
    x3 = rand(rng, 1, 2, 3, 4, 5)
    assert run("global_avg_pool", x3).shape == (1, 2, 1, 1, 1)
    assert result_type("global_max_pool", tensor(("N", 8, "H", "W"))) == tensor(("N", 8, 1, 1))


def test_pool_shapes():
    assert result_type("max_pool", tensor((1, 64, 112, 112)), kernel=(3, 3), strides=(2, 2),
                       pads=(1, 1, 1, 1)) == tensor((1, 64, 56, 56))
    assert result_type("avg_pool", tensor((1, 1, 5, 5)), kernel=(2, 2), strides=(2, 2), ceil_mode=True) == \
        tensor((1, 1, 3, 3))
    assert result_type("max_pool", tensor(("N", 4, "H", 8)), kernel=(3, 2), pads=(1, 0, 1, 0)) == \
        tensor(("N", 4, "H", 7))


@pytest.mark.parametrize("op,x,attrs,needle", [
    ("max_pool", (1, 3, 8, 8), {"kernel": (3,)}, "kernel has 1 values but x has 2 spatial dims"),
    ("max_pool", (1, 3, 8, 8), {"kernel": (3, 3), "pads": (3, 0, 0, 0)}, "must be smaller than the kernel"),
    ("max_pool", (1, 3, 2, 8), {"kernel": (3, 3)}, "spatial axis 0: window extent 3"),
    ("avg_pool", (1, 3, 8, 8), {"kernel": (2, 2), "strides": (0, 1)}, "strides = \\(0, 1\\)"),
    ("avg_pool", (1, 3, 8, 8), {"kernel": (0, 2)}, "every value must be >= 1"),
    ("max_pool", (3, 8), {"kernel": (2,)}, "at least one spatial dim"),
    ("global_avg_pool", (3, 8), {}, "at least one spatial dim"),
])
def test_pool_shape_errors_name_the_op(op, x, attrs, needle):
    with pytest.raises(ShapeError, match=needle) as e:
        result_type(op, tensor(x), **attrs)
    assert f"graph.{op}" in str(e.value)


def test_avg_pool_rejects_integers_and_dilations():
    with pytest.raises(ShapeError, match="floating point"):
        result_type("avg_pool", tensor((1, 1, 4, 4), "i32"), kernel=(2, 2))
    with pytest.raises(IRError, match="unknown attribute 'dilations'"):
        result_type("avg_pool", tensor((1, 1, 4, 4)), kernel=(2, 2), dilations=(1, 1))
    with pytest.raises(IRError, match="missing required attribute 'kernel'"):
        result_type("max_pool", tensor((1, 1, 4, 4)))


def test_verifier_catches_a_broken_pool_attribute():
    with pytest.raises(IRError, match="graph.max_pool.*kernel has 3 values"):
        set_attr_and_verify("max_pool", [tensor((1, 3, 8, 8))], "kernel", (2, 2, 2), kernel=(2, 2))


def test_pool_cost():
    c = cost("max_pool", tensor((1, 64, 112, 112)), kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    assert c.flops == 64 * 56 * 56 * 9
    assert c.bytes == (64 * 112 * 112 + 64 * 56 * 56) * 4
    assert cost("global_avg_pool", tensor((2, 8, 7, 7))).flops == 2 * 8 * 49
