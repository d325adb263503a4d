"""QDQ models (onnxruntime's ``quantize_static``) run their convolutions and linear layers on the
int8 kernels (``qdq-contractions``), and agree with onnxruntime's outputs to within one output
quantum; weights that are not exactly int8 values times a scale stay float.  The models' weights
are quantized to 7 bits (``reduce_range``), which onnxruntime's int8 kernels sum exactly on every
host (``ort_int8``: without VNNI they saturate on full-range weights, off by several quanta)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.passes.graph.qdq import recover_int8  # noqa: E402
from tensorforge.passes.pipeline import optimize  # noqa: E402
from tests.passes.ort_int8 import SATURATION_FREE  # noqa: E402


def _cnn() -> onnx.ModelProto:
    """conv 3->16 3x3, relu, conv 16->32 3x3 stride 2, relu, flatten, gemm -> 10 (float)."""
    rng = np.random.default_rng(0)
    inits = {"w1": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3,
             "b1": rng.standard_normal(16).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1,
             "b2": rng.standard_normal(32).astype(np.float32) * 0.1,
             "w3": rng.standard_normal((10, 32 * 8 * 8)).astype(np.float32) * 0.02,
             "b3": rng.standard_normal(10).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    return _model(nodes, inits, [1, 10])


def _model(nodes, inits: dict, out_shape: list[int]) -> onnx.ModelProto:
    """An opset-17 model of ``nodes`` from x (1, 3, 16, 16) to y (``out_shape``), float32."""
    graph = helper.make_graph(nodes, "model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _samples(n: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed + i).standard_normal((1, 3, 16, 16)).astype(np.float32) for i in range(n)]


@pytest.fixture(scope="module")
def qdq_cnn(tmp_path_factory) -> bytes:
    with open(_qdq(tmp_path_factory.mktemp("qdq"), _cnn(), 100), "rb") as f:
        return f.read()


def test_qdq_model_runs_int8_kernels(qdq_cnn):
    module = tensorforge.import_model(onnx.load_from_string(qdq_cnn))
    optimize(module, "cpu", None)
    names = [op.name for op in module.main.body]
    assert names.count("graph.qconv") == 2 and names.count("graph.qmatmul") == 1
    assert "graph.conv" not in names and "graph.gemm" not in names
    cm = tensorforge.compile(onnx.load_from_string(qdq_cnn))
    assert "tf_qconv_" in cm.source and "tf_qgemm_" in cm.source


def test_qdq_outputs_agree_with_onnxruntime(qdq_cnn):
    """The dequantized logits within one output quantum of onnxruntime's, the same top-1."""
    model = onnx.load_from_string(qdq_cnn)
    out_scale = next(float(numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "y_scale")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(qdq_cnn, so, providers=["CPUExecutionProvider"])
    cm = tensorforge.compile(model)
    for x in _samples(10, 1000):
        want, got = sess.run(None, {"x": x})[0], np.asarray(cm(x))
        assert np.abs(got - want).max() <= out_scale * 1.001
        assert got.argmax() == want.argmax()


def test_recover_int8_is_exact_or_nothing():
    rng = np.random.default_rng(1)
    wq = rng.integers(-127, 128, (6, 5, 3, 3)).astype(np.int8)
    wq[:, 0, 0, 0] = 127                                           # every channel reaches the limit
    s = (rng.random(6) * 0.01 + 1e-4).astype(np.float32)
    w = (wq.astype(np.float32) * s.reshape(6, 1, 1, 1)).astype(np.float32)
    got = recover_int8(w)
    assert got is not None
    np.testing.assert_array_equal(got[0], wq)
    np.testing.assert_array_equal((got[0].astype(np.float32) * got[1].reshape(6, 1, 1, 1)), w)
    assert recover_int8(w * np.float32(1.0001)) is None or np.array_equal(
        (recover_int8(w * np.float32(1.0001))[0] * recover_int8(w * np.float32(1.0001))[1].reshape(6, 1, 1, 1)),
        w * np.float32(1.0001))
    assert recover_int8(rng.standard_normal((4, 9)).astype(np.float32)) is None      # a float weight stays float


def _residual_cnn() -> onnx.ModelProto:
    """conv 3->8 + relu, conv 8->8, add of the first conv's output, relu, conv 8->4: a ResNet block."""
    rng = np.random.default_rng(5)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
             "b1": rng.standard_normal(8).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2,
             "b2": rng.standard_normal(8).astype(np.float32) * 0.1,
             "w3": rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3,
             "b3": rng.standard_normal(4).astype(np.float32) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y"])]
    return _model(nodes, inits, [1, 4, 16, 16])


def _qdq(tmp_path, model: onnx.ModelProto, seed: int) -> str:
    """``model`` quantized by onnxruntime's ``quantize_static`` (QDQ, per-channel int8 weights of 7
    bits, uint8 activations), calibrated on 8 samples; the file's path."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{"x": s} for s in _samples(8, seed)])

        def get_next(self):
            return next(self.it, None)

    src, dst = tmp_path / "f32.onnx", tmp_path / "qdq.onnx"
    src.write_bytes(model.SerializeToString())
    quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, reduce_range=True)
    weights = [numpy_helper.to_array(t).astype(int) for t in onnx.load(str(dst)).graph.initializer
               if t.data_type == TensorProto.INT8]
    assert max(np.abs(w).max() for w in weights) <= SATURATION_FREE      # onnxruntime's sums are exact
    return str(dst)


def _optimized_ops(path: str, *names: str) -> list[list]:
    """The ops of each name in the QDQ model at ``path`` after the CPU pipeline, in program order."""
    module = tensorforge.import_model(onnx.load(path))
    optimize(module, "cpu", None)
    return [[op for op in module.main.body if op.name == name] for name in names]


def _within_one_quantum_of_onnxruntime(path: str, seed: int) -> None:
    """tensorforge's outputs of the QDQ model at ``path`` on 5 samples are within one output quantum
    (``y_scale``) of onnxruntime's."""
    out_scale = next(float(numpy_helper.to_array(t)) for t in onnx.load(path).graph.initializer if t.name == "y_scale")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    cm = tensorforge.compile(path)
    for x in _samples(5, seed):
        want, got = sess.run(None, {"x": x})[0], np.asarray(cm(x))
        assert np.abs(got - want).max() <= out_scale * 1.001


def test_qdq_max_pool_runs_on_uint8(tmp_path):
    """conv, relu, max pool 3x3/2, conv in QDQ form: the pool moves before the DequantizeLinear and
    runs on the uint8 tensor, whose QuantizeLinear round trip then cancels, so the second conv
    reads the pool's uint8 output; the outputs stay within one quantum of onnxruntime's."""
    rng = np.random.default_rng(9)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
             "w2": rng.standard_normal((4, 8, 1, 1)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    path = _qdq(tmp_path, _model(nodes, inits, [1, 4, 8, 8]), 400)
    pools, convs = _optimized_ops(path, "graph.max_pool", "graph.qconv")
    assert len(pools) == 1 and pools[0].operands[0].type.dtype.value == "ui8"
    assert convs[1].operands[0] is pools[0].results[0]
    _within_one_quantum_of_onnxruntime(path, 500)


def test_qdq_concat_runs_on_uint8(tmp_path):
    """Two conv branches concatenated along channels, then a conv (an Inception/SqueezeNet block)
    in QDQ form: the QuantizeLinear after the concat moves onto its inputs, where it cancels the
    branches' DequantizeLinear or requantizes their uint8 outputs, so the concat joins uint8
    tensors, no float32 tensor is left between the convs, and the last conv reads the concat's
    uint8 output; the outputs stay within one quantum of onnxruntime's."""
    rng = np.random.default_rng(11)
    inits = {"w1": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
             "wa": rng.standard_normal((6, 8, 1, 1)).astype(np.float32) * 0.3,
             "wb": rng.standard_normal((10, 8, 3, 3)).astype(np.float32) * 0.2,
             "w2": rng.standard_normal((4, 16, 1, 1)).astype(np.float32) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wa"], ["ca"]),
             helper.make_node("Relu", ["ca"], ["ra"]),
             helper.make_node("Conv", ["r1", "wb"], ["cb"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["cb"], ["rb"]),
             helper.make_node("Concat", ["ra", "rb"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w2"], ["y"])]
    path = _qdq(tmp_path, _model(nodes, inits, [1, 4, 16, 16]), 600)
    cats, convs = _optimized_ops(path, "graph.concat", "graph.qconv")
    assert len(cats) == 1 and len(convs) == 4
    assert all(v.type.dtype.value == "ui8" for v in [*cats[0].operands, cats[0].results[0]])
    assert convs[3].operands[0] is cats[0].results[0]
    _within_one_quantum_of_onnxruntime(path, 700)


def test_qdq_residual_add_runs_in_the_conv_epilogue(tmp_path):
    """onnxruntime's QDQ form of a residual block: the add of two dequantized uint8 tensors and
    the QuantizeLinear after it fold into the second conv (uint8 residual, uint8 result), so the
    graph keeps no float add and no float32 tensor between the convs; outputs within one quantum
    of onnxruntime's."""
    dst = _qdq(tmp_path, _residual_cnn(), 200)
    module = tensorforge.import_model(onnx.load(dst))
    optimize(module, "cpu", None)
    convs = [op for op in module.main.body if op.name == "graph.qconv"]
    assert len(convs) == 3 and not any(op.name == "graph.add" and not any(o.op.name == "graph.constant" for o in op.operands)
                                       for op in module.main.body)        # no add of two tensors is left
    block = convs[1]
    assert block.attributes["residual_scale"] and block.attributes["requant_scale"]
    assert block.operands[6].type.dtype.value == "ui8" and block.results[0].type.dtype.value == "ui8"
    assert convs[2].operands[0].type.dtype.value == "ui8"          # reads the block's uint8 output
    model = onnx.load(dst)
    out_scale = next(float(numpy_helper.to_array(t)) for t in model.graph.initializer if t.name == "y_scale")
    sess = ort.InferenceSession(dst, providers=["CPUExecutionProvider"])
    cm = tensorforge.compile(model)
    for x in _samples(5, 300):
        want, got = sess.run(None, {"x": x})[0], np.asarray(cm(x))
        assert np.abs(got - want).max() <= out_scale * 1.001


def test_qdq_model_on_opencl_runs_its_dequantized_arithmetic(qdq_cnn):
    """The int8 kernels are CPU-only: a GPU build keeps the QuantizeLinear/DequantizeLinear pairs
    and computes in float32, which matches onnxruntime's int8 result up to its requantization."""
    from tensorforge.runtime.opencl import opencl_available
    if not opencl_available():
        pytest.skip("no OpenCL driver")
    import onnxruntime as ort
    x = _samples(1, 7)[0]
    gpu = tensorforge.compile(onnx.load_from_string(qdq_cnn), target="opencl", db=None)
    got = gpu(x)
    want = ort.InferenceSession(qdq_cnn, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    scale = np.abs(want).max()
    assert np.abs(got - want).max() <= 0.05 * scale
    with pytest.raises(tensorforge.TensorforgeError, match="CPU kernels only"):
        tensorforge.compile(onnx.load_from_string(qdq_cnn), target="cuda", precision="int8", calibration=[x])
