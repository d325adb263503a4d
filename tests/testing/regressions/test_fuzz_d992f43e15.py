"""Differential-fuzzer regression d992f43e15: cpu shape (AveragePool, ceil mode, a dilated
window larger than the input; fixed in dialects/graph/base.py ``Window.out_dim``).

ONNX's ceil-mode output size is ``ceil((in + pads - (k-1)*d - 1) / stride) + 1`` (less a last
window that would start in the end padding), also when the dilated window ``(k-1)*d + 1`` is
larger than the padded input: here in 2, window 3, stride 2 gives ceil(-1/2) + 1 = 1 window that
starts in the input and runs past its end (onnxruntime, onnx.reference and PyTorch agree).
``out_dim`` treated any window larger than the padded input as "no window" (0, an empty
constant); it now applies the ceil formula to the negative span, and the window reads the
input where it overlaps it (the overhang counts in no average).

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --batch 16 and minimised; when found:
    s4242b850c6 [cpu] shape s4242b850c6_averag11: shape [1, 1, 0, 1] != [1, 1, 1, 1] (ops AveragePool; specials -)
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
        helper.make_node('AveragePool', ['in10'], ['averag11'], kernel_shape=[2, 1], strides=[2, 2], dilations=[2, 2], pads=[0, 0, 0, 0], count_include_pad=1, ceil_mode=1),
    ]
    inputs = [helper.make_tensor_value_info('in10', 1, [1, 1, 2, 1])]
    outputs = [helper.make_tensor_value_info('averag11', 1, [1, 1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([0.8199999928474426, 0.33000001311302185], dtype=np.float32).reshape((1, 1, 2, 1)),
]


def test_fuzz_d992f43e15():
    assert check_model(build(), FEEDS, targets=('cpu',)) == []
