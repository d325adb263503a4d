"""ONNX integer matmuls (MatMulInteger, QLinearMatMul, onnxruntime's quantize_dynamic) run on the int8
kernel: ``int8-contractions`` rewrites them to ``graph.qmatmul`` and the outputs stay exact.

The int32 results of MatMulInteger must equal NumPy's bit for bit, and onnxruntime's where its sums
are exact (``ort_int8``: not uint8 activations on a host without VNNI); QLinearMatMul's requantised
uint8 within 1 of onnxruntime (its rounding of the float rescale; weights it sums exactly on every
host); quantize_dynamic's float outputs as onnxruntime's up to float rounding of the rescale.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.dialects.graph.quant import pack_vnni, unpack_vnni, vnni_packed_size  # noqa: E402
from tensorforge.passes.pipeline import optimize  # noqa: E402
from tests.passes.ort_int8 import exact_in_onnxruntime, saturation_free_weights  # noqa: E402

ort = pytest.importorskip("onnxruntime")

_TYPES = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8, np.int32: TensorProto.INT32,
          np.float32: TensorProto.FLOAT}


def _model(nodes, inputs, outputs, inits, opset=17) -> bytes:
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info(n, _TYPES[t], s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, _TYPES[t], s) for n, t, s in outputs],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m.SerializeToString()


def _ort(model: bytes, feeds: dict) -> list:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feeds)


def _compile(model: bytes, **kw):
    return tensorforge.compile(onnx.load_from_string(model), **kw)


def _uses_int8_kernel(cm) -> bool:
    return "tf_qgemm_" in cm.source


def _ops(model: bytes) -> list[str]:
    m = tensorforge.import_model(onnx.load_from_string(model))
    optimize(m, "cpu", None)
    return [op.name for op in m.main.body]


@pytest.mark.parametrize("k, n", [(1, 1), (5, 17), (64, 32), (130, 33)])
def test_vnni_packing_round_trips(k, n):
    b = np.random.default_rng(k * 100 + n).integers(-128, 128, (k, n)).astype(np.int8)
    p = pack_vnni(b)
    assert p.dtype == np.int8 and p.size == vnni_packed_size(k, n)
    np.testing.assert_array_equal(unpack_vnni(p, k, n), b)
    # one 64-byte vector holds 16 columns x 4 consecutive k: byte 4*j + q of group g is b[4g+q, j]
    assert p[4 * 3 + 1] == (b[1, 3] if k > 1 and n > 3 else 0)


@pytest.mark.parametrize("dtype, zp", [(np.uint8, 0), (np.uint8, 131), (np.int8, 0), (np.int8, -7)])
@pytest.mark.parametrize("shape", [(1, 37), (9, 64), (2, 5, 130)])
def test_matmul_integer_is_exact(dtype, zp, shape):
    rng = np.random.default_rng(3)
    k, n = shape[-1], 33
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])],
                   [("a", dtype, list(shape))], [("y", np.int32, list(shape[:-1]) + [n])],
                   {"w": w, "za": np.array(zp, dtype)})
    assert "graph.qmatmul" in _ops(model) and "graph.matmul" not in _ops(model)
    cm = _compile(model)
    assert _uses_int8_kernel(cm)
    want = (a.astype(np.int64) - zp) @ w.astype(np.int64)
    got = cm(a)
    np.testing.assert_array_equal(got, want)
    if exact_in_onnxruntime(dtype, w):
        np.testing.assert_array_equal(got, _ort(model, {"a": a})[0])


def test_extreme_values_do_not_saturate():
    """255 x -128 summed over K = 1024: every product at its largest magnitude, no int16 step."""
    k, n = 1024, 20
    a = np.full((3, k), 255, np.uint8)
    w = np.full((k, n), -128, np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
                   [("a", np.uint8, [3, k])], [("y", np.int32, [3, n])], {"w": w})
    cm = _compile(model)
    assert _uses_int8_kernel(cm)
    np.testing.assert_array_equal(cm(a), np.full((3, n), 255 * -128 * k, np.int32))


def test_runtime_zero_point_input():
    """A zero point computed at run time (DynamicQuantizeLinear's) is a kernel input, not a constant."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (4, 48)).astype(np.uint8)
    w = rng.integers(-128, 128, (48, 24)).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])],
                   [("a", np.uint8, [4, 48]), ("za", np.uint8, [])], [("y", np.int32, [4, 24])], {"w": w})
    cm = _compile(model)
    assert _uses_int8_kernel(cm)
    for zp in (0, 77, 255):
        za = np.array(zp, np.uint8)
        np.testing.assert_array_equal(cm(a, za), (a.astype(np.int64) - zp) @ w)


def test_weights_outside_int8_stay_on_the_int32_path():
    """uint8 weights above 127 do not fit the s8 operand of vpdpbusd: the matmul stays int32, exact."""
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (4, 16)).astype(np.uint8)
    w = rng.integers(0, 256, (16, 8)).astype(np.uint8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w"], ["y"])],
                   [("a", np.uint8, [4, 16])], [("y", np.int32, [4, 8])], {"w": w})
    assert "graph.qmatmul" not in _ops(model)
    np.testing.assert_array_equal(_compile(model)(a), a.astype(np.int64) @ w)


def test_qlinear_matmul_within_one_of_onnxruntime():
    """The requantized uint8 within 1 of onnxruntime's (weights whose sums it gets exact on every host)."""
    rng = np.random.default_rng(6)
    a = rng.integers(0, 256, (8, 96)).astype(np.uint8)
    w = saturation_free_weights(rng, (96, 40))
    inits = {"w": w, "sa": np.array(0.02, np.float32), "za": np.array(120, np.uint8),
             "sw": np.array(0.01, np.float32), "zw": np.array(0, np.int8),
             "sy": np.array(0.5, np.float32), "zy": np.array(128, np.uint8)}
    model = _model([helper.make_node("QLinearMatMul", ["a", "sa", "za", "w", "sw", "zw", "sy", "zy"], ["y"])],
                   [("a", np.uint8, [8, 96])], [("y", np.uint8, [8, 40])], inits)
    cm = _compile(model)
    assert _uses_int8_kernel(cm)
    got, want = cm(a).astype(np.int32), _ort(model, {"a": a})[0].astype(np.int32)
    assert np.abs(got - want).max() <= 1


def test_quantize_dynamic_model_runs_int8(tmp_path):
    """onnxruntime's quantize_dynamic (what it writes for a transformer's MatMuls) compiles to the
    int8 kernel, and the float outputs agree with onnxruntime's."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(7)
    w1, w2 = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 32)).astype(np.float32)
    b1 = rng.standard_normal(96).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
                    helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "w2"], ["y"])],
                   [("x", np.float32, [2, 7, 64])], [("y", np.float32, [2, 7, 32])], {"w1": w1, "b1": b1, "w2": w2})
    src, dst = tmp_path / "f32.onnx", tmp_path / "int8.onnx"
    src.write_bytes(model)
    quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
    quantized = dst.read_bytes()
    assert _ops(quantized).count("graph.qmatmul") == 2
    x = rng.standard_normal((2, 7, 64)).astype(np.float32)
    cm = _compile(quantized)
    assert _uses_int8_kernel(cm)
    got, want = cm(x), _ort(quantized, {"x": x})[0]
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 1e-4 * scale, np.abs(got - want).max() / scale
    # int8 against the float model: the quantization error, stated
    f32 = _ort(model, {"x": x})[0]
    assert np.abs(got - f32).max() <= 0.05 * np.abs(f32).max()


def test_interpreter_runs_qmatmul():
    """The reference semantics (``QMatMul.compute``) unpack the VNNI layout: same integers."""
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (5, 20)).astype(np.int8)
    w = rng.integers(-128, 128, (20, 9)).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["a", "w", "za"], ["y"])],
                   [("a", np.int8, [5, 20])], [("y", np.int32, [5, 9])], {"w": w, "za": np.array(3, np.int8)})
    cm = _compile(model, target="interpreter")
    np.testing.assert_array_equal(cm(a), (a.astype(np.int64) - 3) @ w)


def _conv_model(node: str, dtype, x_shape, w, pads, strides, extra_inits=None, out=np.int32):
    inits = {"w": w, **(extra_inits or {})}
    oh = (x_shape[2] + pads[0] + pads[2] - w.shape[2]) // strides[0] + 1
    ow = (x_shape[3] + pads[1] + pads[3] - w.shape[3]) // strides[1] + 1
    ins = {"ConvInteger": ["x", "w", "xz"],
           "QLinearConv": ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]}[node]
    return _model([helper.make_node(node, ins, ["y"], pads=list(pads), strides=list(strides))],
                  [("x", dtype, list(x_shape))], [("y", out, [x_shape[0], w.shape[0], oh, ow])], inits)


@pytest.mark.parametrize("pads, strides", [((1, 1, 1, 1), (1, 1)), ((0, 0, 0, 0), (1, 1)), ((0, 1, 2, 1), (2, 1))])
def test_conv_integer_is_exact(pads, strides):
    """ConvInteger (uint8 activations with a zero point, int8 weights) on the int8 conv kernel, bit
    for bit onnxruntime's and NumPy's integers; the padding holds the zero point."""
    rng = np.random.default_rng(9)
    x = rng.integers(0, 256, (2, 5, 9, 10)).astype(np.uint8)
    w = rng.integers(-128, 128, (19, 5, 3, 3) if pads[0] or strides[0] > 1 else (19, 5, 1, 1)).astype(np.int8)
    model = _conv_model("ConvInteger", np.uint8, x.shape, w, pads, strides, {"xz": np.array(131, np.uint8)})
    assert "graph.qconv" in _ops(model) and "graph.conv" not in _ops(model)
    cm = _compile(model)
    assert "tf_qconv_" in cm.source
    np.testing.assert_array_equal(cm(x), _ort(model, {"x": x})[0])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_conv_within_one_of_onnxruntime(dtype):
    """QLinearConv with per-channel weight scales and an int32 bias: the integer sum on the int8
    kernel, requantized as the ONNX reference does (onnxruntime has only the uint8 form; weights
    whose sums it gets exact on every host)."""
    rng = np.random.default_rng(10)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, (1, 6, 11, 12)).astype(dtype)
    w = saturation_free_weights(rng, (21, 6, 3, 3))
    inits = {"xs": np.array(0.02, np.float32), "xz": np.array(7 if dtype == np.int8 else 130, dtype),
             "ws": (rng.random(21) * 0.01 + 0.001).astype(np.float32), "wz": np.zeros(21, np.int8),
             "ys": np.array(0.5, np.float32), "yz": np.array(3, dtype),
             "b": rng.integers(-2000, 2000, 21).astype(np.int32)}
    model = _conv_model("QLinearConv", dtype, x.shape, w, (1, 1, 1, 1), (1, 1), inits, out=dtype)
    cm = _compile(model)
    assert "tf_qconv_" in cm.source
    got = cm(x).astype(np.int32)
    want = _compile(model, target="interpreter")(x).astype(np.int32)       # the ONNX reference arithmetic
    np.testing.assert_array_equal(got, want)
    if dtype == np.uint8:
        assert np.abs(got - _ort(model, {"x": x})[0].astype(np.int32)).max() <= 1
