"""MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv: int32 contractions of graph ops,
bit-exact against ONNX's reference on the interpreter and natively."""
from __future__ import annotations

import numpy as np
import pytest

from tests.frontends.onnx_ref_util import check_against_reference, one_node_model


RNG = np.random.default_rng(11)


def _q(shape, dtype):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_matmul_integer_per_row_zero_points(target):
    """A per-row A zero point, exact int32.  Against NumPy: onnx's reference
    subtracts a per-row zero point along the wrong axis (it broadcasts over the last one)."""
    import tensorforge
    a, b = _q((4, 300), np.uint8), _q((300, 5), np.int8)
    azp, bzp = _q((4,), np.uint8), np.array(-3, np.int8)
    m = one_node_model("MatMulInteger", {"a": a, "b": b}, 10, constants={"azp": azp, "bzp": bzp})
    want = (a.astype(np.int32) - azp.astype(np.int32)[:, None]) @ (b.astype(np.int32) - bzp.astype(np.int32))
    got = np.asarray(tensorforge.compile(m, target=target)(a, b))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_per_column_b_zero_point_is_a_clear_unsupported_error():
    import tensorforge
    from tensorforge.errors import UnsupportedOpError
    m = one_node_model("MatMulInteger", {"a": _q((4, 30), np.uint8), "b": _q((30, 5), np.int8)}, 10,
                       constants={"azp": np.array(1, np.uint8), "bzp": _q((5,), np.int8)})
    with pytest.raises(UnsupportedOpError, match="MatMulInteger.*per-axis"):
        tensorforge.compile(m, target="interpreter")


def test_matmul_integer_scalar_zero_points():
    a, b = _q((3, 40), np.uint8), _q((40, 6), np.uint8)
    m = one_node_model("MatMulInteger", {"a": a, "b": b}, 10,
                       constants={"azp": np.array(7, np.uint8), "bzp": np.array(200, np.uint8)})
    check_against_reference(m, {"a": a, "b": b}, exact=True)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_matmul(dt):
    a, b = _q((3, 4, 40), dt), _q((40, 6), dt)
    consts = {"a_s": np.array(0.02, np.float32), "a_zp": _q((), dt), "b": b, "b_s": np.array(0.03, np.float32),
              "b_zp": _q((), dt), "y_s": np.array(0.9, np.float32), "y_zp": _q((), dt)}
    m = one_node_model("QLinearMatMul", {"a": a}, 21, constants=consts)
    check_against_reference(m, {"a": a}, exact=True)


def test_conv_integer_and_qlinear_conv_per_channel():
    x, w = _q((1, 3, 7, 6), np.uint8), _q((4, 3, 3, 3), np.uint8)
    m = one_node_model("ConvInteger", {"x": x, "w": w}, 10, constants={"xzp": np.array(3, np.uint8)},
                       pads=[1, 0, 1, 2], strides=[2, 1])
    check_against_reference(m, {"x": x, "w": w}, exact=True)
    consts = {"x_s": np.array(0.05, np.float32), "x_zp": np.array(7, np.uint8), "w": w,
              "w_s": np.array([0.01, 0.02, 0.015, 0.03], np.float32), "w_zp": np.array(128, np.uint8),
              "y_s": np.array(0.4, np.float32), "y_zp": np.array(100, np.uint8),
              "bias": RNG.integers(-500, 500, (4,)).astype(np.int32)}
    m = one_node_model("QLinearConv", {"x": x}, 10, constants=consts, pads=[1, 1, 1, 1])
    check_against_reference(m, {"x": x}, exact=True)
