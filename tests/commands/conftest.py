"""Fixtures for the command-line tests: a tiny ONNX model whose outputs NumPy can compute."""
import numpy as np
import pytest


@pytest.fixture
def tiny_onnx(tmp_path):
    """``relu(x @ W + b)`` with x: float32[N, 4] (N symbolic), W: [4, 5]; returns (path, reference fn)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["xwb"]),
         helper.make_node("Relu", ["xwb"], ["y"])],
        "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return str(path), lambda x: np.maximum(x @ w + b, 0)


def run_cli(argv, capsys):
    """``tensorforge ARGV`` in-process: (exit code, stdout, stderr); argparse's exits included."""
    from tensorforge.cli import main
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err
