"""Post-training int8 of convolutions: ``tensorforge.quantize`` puts one-group 2-D convs on the int8
conv kernel (``graph.qconv``), the dequantize, bias, residual add and relu join its float32 epilogue,
the compiled model equals the reference interpreter on the quantized graph bit for bit, and the
quantization error against float32 stays small."""
import shutil
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402


def float_model(name: str, nodes: list, inits: dict, x_shape: list, outputs: dict) -> onnx.ModelProto:
    """An opset-17 float32 ONNX model: input ``x`` of ``x_shape``, ``outputs`` name -> shape, the
    ``inits`` arrays as float32 initializers."""
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, sh) for n, sh in outputs.items()],
                              [numpy_helper.from_array(np.asarray(a, np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _block() -> onnx.ModelProto:
    """A ResNet basic block after a stem: conv-relu, conv-relu, conv + identity, relu; then a
    depthwise conv and global pooling."""
    rng = np.random.default_rng(0)
    c = 16
    inits = {"w0": rng.standard_normal((c, 3, 3, 3)) * 0.3, "b0": rng.standard_normal(c) * 0.1,
             "w1": rng.standard_normal((c, c, 3, 3)) * 0.1, "b1": rng.standard_normal(c) * 0.1,
             "w2": rng.standard_normal((c, c, 1, 1)) * 0.2, "b2": rng.standard_normal(c) * 0.1,
             "wd": rng.standard_normal((c, 1, 3, 3)) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"]),
             helper.make_node("Add", ["c2", "r0"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Conv", ["r2", "wd"], ["d"], pads=[1, 1, 1, 1], group=c),
             helper.make_node("GlobalAveragePool", ["d"], ["y"])]
    return float_model("block", nodes, inits, [1, 3, 12, 12], {"r2": [1, c, 12, 12], "y": [1, c, 1, 1]})


def _inputs(n: int, seed: int) -> list[np.ndarray]:
    return [np.random.default_rng(seed + i).standard_normal((1, 3, 12, 12)).astype(np.float32) for i in range(n)]


@pytest.mark.parametrize("residuals", [True, False], ids=["uint8-residual", "float-residual"])
def test_convs_run_int8_with_their_epilogue(residuals):
    model = _block()
    q = tensorforge.quantize(model, _inputs(4, 100), keep_first_last=False, residuals=residuals, depthwise=False)
    qconvs = [op for op in q.main.body if op.name == "graph.qconv"]
    assert len(qconvs) == 3                                   # the depthwise conv stays float
    assert [op for op in q.main.body if op.name == "graph.conv"][0].attributes["groups"] == 16
    # the epilogues: the second writes the third's uint8 input (requantized in its kernel), the
    # third adds the residual (the first conv's result) and applies relu.  The residual is the
    # uint8 tensor the second conv reads (written by the first conv, dequantized in the third's
    # epilogue), or with residuals=False the first conv's float32 result
    first = "u8" if residuals else "f32"
    assert [op.results[0].type.dtype.name for op in qconvs] == [first, "u8", "f32"]
    assert qconvs[1].attributes["output_scale"] and qconvs[0].attributes["input_scale"]
    assert len(qconvs[2].operands) == 7 and qconvs[2].attributes["relu"]
    assert bool(qconvs[2].attributes.get("residual_scale")) == residuals
    assert qconvs[2].operands[6].type.dtype.name == first
    cm = tensorforge.compile(q)
    assert "tf_qconv_u8" in cm.source
    f32 = tensorforge.compile(model)
    for x in _inputs(5, 1000):
        block, pooled = (np.asarray(v) for v in cm(x))
        np.testing.assert_array_equal(block, run_function(q.main, [x])[0])   # the int8 kernels are exact
        for got, want in zip((block, pooled), f32(x)):
            want = np.asarray(want)          # 8-bit error: relative RMS (measured 0.2-3.1%)
            assert np.sqrt(np.mean((got - want) ** 2)) <= 0.05 * np.sqrt(np.mean(want ** 2))


def test_a_cpu_without_vnni_is_told_the_fallback(monkeypatch):
    """Without VNNI the int8 kernels still run (the exact portable loop), and the user is told."""
    from tensorforge.codegen.c import qgemm
    from tensorforge.errors import TensorforgeWarning
    monkeypatch.setattr(qgemm, "isa", lambda target: qgemm.SCALAR)
    with pytest.warns(TensorforgeWarning, match="neither AVX512-VNNI nor AVX-VNNI"):
        tensorforge.quantize(_block(), _inputs(2, 100), keep_first_last=False)


def test_depthwise_by_default():
    """Depthwise convs run on the int8 depthwise kernel too (``depthwise=False`` keeps them
    float32, above); still exact against the reference interpreter on the quantized graph."""
    model = _block()
    q = tensorforge.quantize(model, _inputs(4, 100), keep_first_last=False)
    qconvs = [op for op in q.main.body if op.name == "graph.qconv"]
    assert len(qconvs) == 4 and qconvs[-1].attributes["groups"] == 16
    assert "graph.conv" not in [op.name for op in q.main.body]
    cm = tensorforge.compile(q)
    assert "tf_qdwconv_u8" in cm.source
    x = _inputs(1, 2000)[0]
    np.testing.assert_array_equal(np.asarray(cm(x)[0]), run_function(q.main, [x])[0])
    pooled, want = np.asarray(cm(x)[1]), np.asarray(tensorforge.compile(model)(x)[1])
    assert np.sqrt(np.mean((pooled - want) ** 2)) <= 0.05 * np.sqrt(np.mean(want ** 2))


def test_max_pool_between_int8_convs_runs_on_uint8():
    """conv-relu, max pool 3x3/2, conv: the QuantizeLinear of the pool's output moves before the
    pool (quantizing is non-decreasing), so the first conv writes uint8, the pool runs on it and
    the second conv reads it; exact against the interpreter, close to float32."""
    rng = np.random.default_rng(4)
    inits = {"w0": rng.standard_normal((8, 3, 3, 3)) * 0.3, "w1": rng.standard_normal((4, 8, 1, 1)) * 0.3}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"]),
             helper.make_node("MaxPool", ["r0"], ["p"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p", "w1"], ["y"])]
    model = float_model("pool", nodes, inits, [1, 3, 12, 12], {"y": [1, 4, 6, 6]})
    q = tensorforge.quantize(model, _inputs(4, 100), keep_first_last=False)
    pool = next(op for op in q.main.body if op.name == "graph.max_pool")
    qconvs = [op for op in q.main.body if op.name == "graph.qconv"]
    assert pool.operands[0] is qconvs[0].results[0] and pool.operands[0].type.dtype.name == "u8"
    assert qconvs[1].operands[0] is pool.results[0]
    cm, f32 = tensorforge.compile(q), tensorforge.compile(model)
    for x in _inputs(3, 500):
        got = np.asarray(cm(x))
        np.testing.assert_array_equal(got, run_function(q.main, [x])[0])
        want = np.asarray(f32(x))
        assert np.sqrt(np.mean((got - want) ** 2)) <= 0.05 * np.sqrt(np.mean(want ** 2))


def test_int8_library_inlines_its_vpdpbusd():
    """The int8 kernels' ``vpdpbusd`` wrapper is inlined at every use.  In the library of
    MobileNetV2 quantized by ``tensorforge.quantize`` gcc once emitted it as a function of its
    own and called it for every instruction (zmm operands through the stack): the model ran at
    5.4 ms where its int8 kernels take 2.5.  A local symbol of that name in the built library is
    such a call; the outputs stay close to float32."""
    from tensorforge.codegen import Target
    from tensorforge.codegen.c import qgemm
    from tensorforge.models import get

    if qgemm.isa(Target.host()) != qgemm.AVX512_VNNI:
        pytest.skip("host lacks AVX512-VNNI")
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    torch = pytest.importorskip("torch")
    model, example = get("mobilenet_v2_small", 1)
    samples = [get("mobilenet_v2_small", 1, input_seed=100 + i)[1] for i in range(2)]
    cm = tensorforge.compile(tensorforge.quantize(model, samples, example), threads=2)
    symbols = subprocess.run([nm, str(cm.native.library_path)], capture_output=True, text=True, timeout=60,
                             check=True).stdout.split("\n")
    assert [s for s in symbols if s.endswith(" tf_qgemm_dpbusd512")] == []
    with torch.no_grad():
        want = model(*example).numpy()
    got = np.asarray(cm(*example))
    assert np.sqrt(np.mean((got - want) ** 2)) <= 0.1 * np.sqrt(np.mean(want ** 2))
