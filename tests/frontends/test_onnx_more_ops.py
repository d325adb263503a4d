"""ONNX ops done by decomposition or at import: MaxPool's Indices, MaxUnpool, Pad wrap, Det,
MelWeightMatrix, the ai.onnx.ml Binarizer/ArrayFeatureExtractor and casts to FLOAT8E8M0, each on
the reference interpreter and on the native C target, against hand-computed values or the ONNX
reference implementation."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import tensorforge  # noqa: E402

TARGETS = ["interpreter", "cpu"]


def _model(nodes, inputs, outputs, opset=22, ml=False):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid("ai.onnx.ml", 3)] if ml else [])
    return helper.make_model(graph, opset_imports=ops, ir_version=10)


def _run(m, target, *xs):
    out = tensorforge.compile(m, target=target)(*xs)
    return [np.asarray(o) for o in out] if isinstance(out, (list, tuple)) else [np.asarray(out)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("storage_order", [0, 1])
def test_maxpool_indices(target, storage_order):
    x = np.array([[[[1, 5, 2, 0], [3, 4, 9, 9], [7, 1, 0, 8]]],
                  [[[0, 0, 0, 0], [0, 6, 0, 0], [0, 0, 0, 2]]]], np.float32)       # (2, 1, 3, 4)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[1, 2],
                            pads=[1, 0, 0, 0], storage_order=storage_order)
    m = _model([node], [("x", T.FLOAT, (2, 1, 3, 4))], [("y", T.FLOAT, None), ("i", T.INT64, None)])
    y, i = _run(m, target, x)
    want_y = np.array([[[[5, 2], [5, 9], [7, 9]]], [[[0, 0], [6, 0], [6, 2]]]], np.float32)
    # first maximum in window order; padding taps never count; ties pick the first in-bounds tap
    h_w = np.array([[[(0, 1), (0, 2)], [(0, 1), (1, 2)], [(2, 0), (1, 2)]],
                    [[(0, 0), (0, 2)], [(1, 1), (0, 2)], [(1, 1), (2, 3)]]])
    h, w = h_w[..., 0], h_w[..., 1]
    plane = h * 4 + w if storage_order == 0 else h + w * 3
    want_i = (plane + np.arange(2)[:, None, None] * 12)[:, None]
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(i, want_i)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("with_shape", [False, True])
def test_maxunpool(target, with_shape):
    x = np.array([[[[5, 6], [7, 8]]]], np.float32)
    idx = np.array([[[[1, 3], [8, 15]]]], np.int64)
    inputs = [("x", T.FLOAT, (1, 1, 2, 2)), ("i", T.INT64, (1, 1, 2, 2))]
    names = ["x", "i"]
    nodes = []
    if with_shape:
        nodes.append(helper.make_node("Constant", [], ["s"], value=helper.make_tensor("s", T.INT64, [4], [1, 1, 5, 5])))
        names.append("s")
    nodes.append(helper.make_node("MaxUnpool", names, ["y"], kernel_shape=[2, 2], strides=[2, 2]))
    (y,) = _run(_model(nodes, inputs, [("y", T.FLOAT, None)]), target, x, idx)
    want = np.zeros((16,), np.float32)
    want[[1, 3, 8, 15]] = [5, 6, 7, 8]
    want = want.reshape(1, 1, 4, 4)
    if with_shape:
        want = np.pad(want, [(0, 0), (0, 0), (0, 1), (0, 1)])
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", TARGETS)
def test_pad_wrap(target):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    pads = helper.make_tensor("p", T.INT64, [4], [2, -1, 4, 3])        # a crop on axis 1, wrap past the size
    nodes = [helper.make_node("Constant", [], ["p"], value=pads),
             helper.make_node("Pad", ["x", "p"], ["y"], mode="wrap")]
    (y,) = _run(_model(nodes, [("x", T.FLOAT, (3, 4))], [("y", T.FLOAT, None)]), target, x)
    want = np.pad(x[:, 1:], [(2, 4), (0, 3)], mode="wrap")
    assert y.shape == (9, 6)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_det(target, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((2, 3, n, n)).astype(np.float32)
    m = _model([helper.make_node("Det", ["x"], ["y"])], [("x", T.FLOAT, x.shape)], [("y", T.FLOAT, None)])
    (y,) = _run(m, target, x)
    assert y.shape == (2, 3)
    np.testing.assert_allclose(y, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_mel_weight_matrix(target):
    from onnx.reference import ReferenceEvaluator
    consts = [("n", T.INT64, 6), ("d", T.INT64, 32), ("sr", T.INT64, 16000), ("lo", T.FLOAT, 100.0),
              ("hi", T.FLOAT, 7000.0)]
    nodes = [helper.make_node("Constant", [], [k], value=helper.make_tensor(k, t, [], [v])) for k, t, v in consts]
    nodes.append(helper.make_node("MelWeightMatrix", [k for k, _, _ in consts], ["w"]))
    # a zero-size-free dummy input keeps the model callable with one argument
    nodes.append(helper.make_node("Identity", ["x"], ["z"]))
    m = _model(nodes, [("x", T.FLOAT, (1,))], [("w", T.FLOAT, None), ("z", T.FLOAT, None)])
    w, _ = _run(m, target, np.zeros(1, np.float32))
    want = ReferenceEvaluator(m).run(None, {"x": np.zeros(1, np.float32)})[0]
    assert w.shape == (17, 6)
    assert (w > 0).any()
    np.testing.assert_allclose(w, want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("target", TARGETS)
def test_binarizer_and_array_feature_extractor(target):
    x = np.array([[0.5, 1.5, -2.0, 1.0], [3.0, 0.0, 1.01, np.nan]], np.float32)
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=1.0),
             helper.make_node("ArrayFeatureExtractor", ["x", "k"], ["f"], domain="ai.onnx.ml")]
    m = _model(nodes, [("x", T.FLOAT, (2, 4)), ("k", T.INT64, (3,))],
               [("b", T.FLOAT, None), ("f", T.FLOAT, None)], ml=True)
    b, f = _run(m, target, x, np.array([3, 0, 3], np.int64))
    np.testing.assert_array_equal(b, [[0, 1, 0, 0], [1, 0, 1, 0]])
    np.testing.assert_array_equal(f, x[:, [3, 0, 3]])


def test_other_ml_ops_still_rejected():
    from tensorforge.errors import UnsupportedOpError
    from tensorforge.frontends.onnx import import_onnx
    node = helper.make_node("Normalizer", ["x"], ["y"], domain="ai.onnx.ml")
    m = _model([node], [("x", T.FLOAT, (2, 4))], [("y", T.FLOAT, None)], ml=True)
    with pytest.raises(UnsupportedOpError, match="ai.onnx.ml"):
        import_onnx(m)


_E8M0_IN = np.array([0.0, 0.124, 0.25, -0.75, 1.1, 3.0, 1.5, 2.0 ** 127 * 1.5, np.inf, np.nan, 1e-40, 6.0],
                    np.float32)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [1, 0])
def test_cast_to_e8m0_and_back(target, round_mode, saturate):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from onnx.numpy_helper import to_float8e8m0
    nodes = [helper.make_node("Cast", ["x"], ["e"], to=T.FLOAT8E8M0, round_mode=round_mode, saturate=saturate),
             helper.make_node("Cast", ["e"], ["y"], to=T.FLOAT)]
    m = _model(nodes, [("x", T.FLOAT, (12,))], [("y", T.FLOAT, None)], opset=24)
    (y,) = _run(m, target, _E8M0_IN)
    want = to_float8e8m0(_E8M0_IN, bool(saturate), round_mode).astype(np.float32)
    assert want.dtype == np.float32 and ml_dtypes is not None
    np.testing.assert_array_equal(y, want)                   # NaN where NaN: bit-exact powers of two
    # spot values: 0 -> 2^-127, 0.124 up -> 0.125, 1.5 down -> 1, 3 nearest -> 4, inf -> NaN
    if round_mode == "up":
        assert y[0] == np.float32(2.0 ** -127) and y[1] == 0.125 and y[4] == 2.0
    if round_mode == "down":
        assert y[6] == 1.0 and y[3] == 0.5
    if round_mode == "nearest":
        assert y[5] == 4.0 and y[6] == 2.0
    assert np.isnan(y[8]) and np.isnan(y[9])
    assert (np.isnan(y[7]) if (not saturate and round_mode != "down") else y[7] == np.float32(2.0 ** 127))


@pytest.mark.parametrize("target", TARGETS)
def test_e8m0_model_input(target):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = np.array([2.0 ** -127, 0.5, 1.0, 2.0 ** 100, np.nan], np.float32).astype(ml_dtypes.float8_e8m0fnu)
    m = _model([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT16)], [("x", T.FLOAT8E8M0, (5,))],
               [("y", T.FLOAT16, None)], opset=24)
    from tensorforge.frontends.onnx_backend import prepare
    (y,) = prepare(m, target=target).run([x])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    np.testing.assert_array_equal(np.asarray(y), want)
