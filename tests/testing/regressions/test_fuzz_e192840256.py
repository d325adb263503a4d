"""Differential-fuzzer regression e192840256: cpu shape (AveragePool without ceil mode, a dilated
window larger than the input): an onnxruntime deviation, now classified as such
(testing/fuzz_check.py ``check_outcome`` tie-breaks shape mismatches too).

The ONNX spec's output size is ``floor((in + pads - (k-1)*d - 1) / stride + 1)``: on the first
spatial axis in 4, window 5, stride 2 gives floor(0.5) = 0, an empty axis, as onnx.reference
computes and PyTorch (which refuses an output size of 0).  onnxruntime (and ONNX's C++ shape
inference) divide the negative span -1 by the stride in C++ integer division, which truncates
towards zero, and give 1.  tensorforge follows the spec: 0.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --batch 16 and minimised; when found:
    s4242b352c14 [cpu] shape s4242b352c14_averag2: shape [1, 1, 0, 0] != [1, 1, 1, 0] (ops AveragePool; specials -)
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402,F401

from tensorforge.testing.fuzz_check import check_model  # noqa: E402

nan, inf = np.nan, np.inf


def build():
    nodes = [
        helper.make_node('AveragePool', ['in1'], ['averag2'], kernel_shape=[3, 2], strides=[2, 2], dilations=[2, 2]),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 4, 1])]
    outputs = [helper.make_tensor_value_info('averag2', 1, [1, 1, 1, 0])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.019999999552965164, 0.12999999523162842, 0.10999999940395355, -0.3799999952316284], dtype=np.float32).reshape((1, 1, 4, 1)),
]


def test_fuzz_e192840256():
    assert check_model(build(), FEEDS, targets=('cpu',)) == []


def test_fuzz_e192840256_is_an_onnxruntime_deviation():
    """tensorforge's empty axis is the spec's; the tie-break reports onnxruntime's 1 as its deviation."""
    from tensorforge.testing.fuzz_check import case_from_model, check_cases
    found = check_cases([case_from_model(build(), FEEDS)], targets=('cpu',))
    assert [m.kind for m in found] == ["ort-deviation"], [m.line() for m in found]
    assert "shape" in found[0].detail and "!= [" in found[0].detail
