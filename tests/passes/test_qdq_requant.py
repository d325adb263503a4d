"""A QDQ convolution followed by a uint8 QuantizeLinear runs as onnxruntime's QLinearConv computes
it (``qdq_requant``): the int32 bias added to the sums, one float32 multiplier ``sx * sw / sy`` per
channel.  The outputs are then bit-exact with onnxruntime's, where computing the dequantized
float form (``float32(acc) * s + b``, then quantized) flipped about one output in a million, and
such a flip early in a network moves thousands of later outputs.

The tests hold tensorforge to ``_qlinear_reference``, onnxruntime's formula in NumPy, on every host,
and the formula to onnxruntime's outputs where its sums are exact (``ort_int8``: not on a host
without VNNI, whose u8 x s8 kernel saturates pairs of full-range int8 weights' products)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.passes.pipeline import optimize  # noqa: E402
from tests.passes.ort_int8 import exact_in_onnxruntime  # noqa: E402


def _qdq_conv(seed: int, c: int, o: int, hw: int, k: int, group: int = 1, act: str | None = None,
              zy: int = 0) -> tuple[onnx.ModelProto, np.ndarray, dict]:
    """``Q(act?(conv(DQ(x), DQ(w), DQ(b))))`` on a uint8 input, as onnxruntime's ``quantize_static``
    writes a conv: per-channel int8 weights, an int32 bias at scale ``sx * sw``, uint8 activations;
    with an input and the parameters."""
    rng = np.random.default_rng(seed)
    sx, zx = np.float32(rng.uniform(0.005, 0.02)), np.uint8(rng.integers(80, 130))
    wf = rng.standard_normal((o, c // group, k, k)) * 0.1
    sw = (np.abs(wf).reshape(o, -1).max(1) / 127).astype(np.float32)
    wq = np.clip(np.rint(wf / sw.reshape(-1, 1, 1, 1)), -127, 127).astype(np.int8)
    sb = (sx * sw).astype(np.float32)
    bq = rng.integers(-20000, 20000, o).astype(np.int32)
    sy = np.float32(rng.uniform(0.002, 0.01))
    params = {"sx": sx, "zx": zx, "wq": wq, "sw": sw, "zw": np.zeros(o, np.int8), "bq": bq, "sb": sb,
              "zb": np.zeros(o, np.int32), "sy": sy, "zy": np.uint8(zy)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], pads=[k // 2] * 4, group=group)]
    last = "yf"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [last], ["ya"]))
        last = "ya"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"]))
    graph = helper.make_graph(nodes, "qconv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, o, hw, hw])],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, rng.integers(0, 256, (1, c, hw, hw)).astype(np.uint8), params


def _qlinear_reference(x: np.ndarray, p: dict, k: int, group: int = 1, relu: bool = False) -> np.ndarray:
    """onnxruntime's QLinearConv in NumPy: exact int32 sums plus the bias, times
    ``float32(float32(sx * sw) / sy)``, rounded half to even (at least 0 after a ``relu``), plus the
    zero point, clamped."""
    import torch
    acc = torch.nn.functional.conv2d(torch.tensor(x.astype(np.float64) - float(p["zx"])),
                                     torch.tensor(p["wq"].astype(np.float64)), None, 1, k // 2, 1, group).numpy()
    acc = np.rint(acc).astype(np.int64) + p["bq"].reshape(1, -1, 1, 1)
    m = ((p["sx"] * p["sw"]).astype(np.float32) / p["sy"]).astype(np.float32).reshape(1, -1, 1, 1)
    q = np.rint(acc.astype(np.float32) * m)
    return np.clip((np.maximum(q, 0) if relu else q) + int(p["zy"]), 0, 255).astype(np.uint8)


def _onnxruntime_agrees(model: onnx.ModelProto, x: np.ndarray, params: dict, want: np.ndarray, atol: int = 0) -> None:
    """onnxruntime's output of ``model`` on ``x`` is within ``atol`` of ``want``, where its integer
    sums of ``params["wq"]`` are exact (``ort_int8``); elsewhere it is not a reference."""
    if exact_in_onnxruntime(np.uint8, params["wq"]):
        got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        assert np.abs(got.astype(int) - want.astype(int)).max() <= atol


# (seed, in channels, out channels, size, kernel, groups): the dense cases flipped outputs before
# (3 of 1.2M and 1 of 100K against onnxruntime); the depthwise one takes the same epilogue
CASES = [(0, 16, 96, 112, 1, 1), (0, 16, 32, 56, 3, 1), (2, 16, 96, 112, 1, 1), (0, 32, 32, 56, 3, 32)]


@pytest.mark.parametrize("seed,c,o,hw,k,group", CASES)
def test_qdq_conv_is_bit_exact_with_onnxruntime(seed, c, o, hw, k, group):
    model, x, params = _qdq_conv(seed, c, o, hw, k, group)
    want = _qlinear_reference(x, params, k, group)
    _onnxruntime_agrees(model, x, params, want)                                     # the formula is onnxruntime's
    cm = tensorforge.compile(model)
    qconvs = [op for op in cm.module.main.body if op.name == "graph.qconv"]
    assert len(qconvs) == 1 and qconvs[0].operands[5].type.dtype.name == "i32"      # the int32 bias, in the kernel
    assert qconvs[0].results[0].type.dtype.name == "u8"
    np.testing.assert_array_equal(np.asarray(cm(x)), want)
    module = tensorforge.import_model(model)               # graph.qconv's reference computes the same
    optimize(module, "cpu", None)
    np.testing.assert_array_equal(run_function(module.main, [x])[0], want)


def test_relu_the_quantization_covers_is_dropped_as_onnxruntime_does():
    """zero point 0: the relu is the quantization's own lower clamp (onnxruntime removes it), so the
    conv still requantizes as QLinearConv; with zero point 10 it is not, and the float form stays,
    within one quantum of onnxruntime."""
    model, x, params = _qdq_conv(0, 16, 32, 28, 3, act="relu")
    want = _qlinear_reference(x, params, 3)
    _onnxruntime_agrees(model, x, params, want)
    cm = tensorforge.compile(model)
    assert [op.operands[5].type.dtype.name for op in cm.module.main.body if op.name == "graph.qconv"] == ["i32"]
    np.testing.assert_array_equal(np.asarray(cm(x)), want)
    model, x, params = _qdq_conv(0, 16, 32, 28, 3, act="relu", zy=10)
    want = _qlinear_reference(x, params, 3, relu=True)
    _onnxruntime_agrees(model, x, params, want, atol=1)
    cm = tensorforge.compile(model)
    assert [op.operands[5].type.dtype.name for op in cm.module.main.body if op.name == "graph.qconv"] == ["f32"]
    got = np.asarray(cm(x)).astype(int)
    assert np.abs(got - want.astype(int)).max() <= 1 and got.min() >= 10                 # relu kept: at least zy


def test_a_conv_without_bias_requantizes_as_qlinear_too():
    """No bias operand: the sums times the same multiplier (the zero int32 bias simplifies away,
    adding nothing).  Seed 2 flipped 4 of 1.2M outputs in the dequantized form."""
    model, x, params = _qdq_conv(2, 16, 96, 112, 1)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    del conv.input[2]
    keep = [n for n in model.graph.node if n.output[0] != "bf"]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    want = _qlinear_reference(x, {**params, "bq": np.zeros(96, np.int32)}, 1)
    _onnxruntime_agrees(model, x, params, want)
    cm = tensorforge.compile(model)
    np.testing.assert_array_equal(np.asarray(cm(x)), want)


def test_a_constant_along_the_width_is_not_read_as_a_channel_bias():
    """A 1-D constant added to the conv's NCHW result broadcasts along the width, not the channels.
    With the width equal to the channel count and every element an integer multiple of its
    *channel's* scale, it looked like the int32 bias it is not."""
    model, x, params = _qdq_conv(0, 16, 32, 32, 1)
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    del conv.input[2]
    along_w = (np.arange(32, dtype=np.float32) * 1000 * params["sb"]).astype(np.float32)   # k_j * s_j, j along W
    graph = model.graph
    keep = [n for n in graph.node if n.output[0] != "bf"]
    del graph.node[:]
    graph.node.extend(keep)
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear")
    q.input[0] = "yw"
    graph.node.insert(len(graph.node) - 1, helper.make_node("Add", ["yf", "cw"], ["yw"]))
    graph.initializer.append(numpy_helper.from_array(along_w, "cw"))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = np.asarray(tensorforge.compile(model)(x))
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_a_float_bias_keeps_the_dequantized_form():
    """A bias that is not an integer multiple of ``sx * sw`` (a PyTorch-quantized model keeps a float
    bias) is not rounded into the sums."""
    model, x, params = _qdq_conv(1, 16, 32, 28, 1)
    bias = numpy_helper.from_array((params["bq"] * params["sb"] + params["sb"] / 3).astype(np.float32), "bf")
    graph = model.graph
    keep = [n for n in graph.node if n.output[0] != "bf"]
    del graph.node[:]
    graph.node.extend(keep)
    graph.initializer.append(bias)
    module = tensorforge.import_model(model)
    optimize(module, "cpu", None)
    assert [op.operands[5].type.dtype.name for op in module.main.body if op.name == "graph.qconv"] == ["f32"]
