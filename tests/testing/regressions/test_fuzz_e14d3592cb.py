"""Differential-fuzzer regression e14d3592cb: cpu shape (MaxPool, ceil mode, a dilated window
larger than the input; fixed in dialects/graph/base.py ``Window.out_dim``).

ONNX's ceil-mode output size is ``ceil((in + pads - (k-1)*d - 1) / stride) + 1`` (less a last
window that would start in the end padding), also when the dilated window ``(k-1)*d + 1`` is
larger than the padded input: here in 2, window 3, stride 2 gives ceil(-1/2) + 1 = 1 window that
starts in the input and runs past its end (onnxruntime, onnx.reference and PyTorch agree).
``out_dim`` treated any window larger than the padded input as "no window" (0, an empty
constant); it now applies the ceil formula to the negative span, and the overhang never wins
the max.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --batch 16 and minimised; when found:
    s4242b191c14 [cpu] shape s4242b191c14_maxpoo3: shape [1, 1, 0] != [1, 1, 1] (ops MaxPool; specials -)
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
        helper.make_node('MaxPool', ['floor2'], ['maxpoo3'], kernel_shape=[2], strides=[2], dilations=[2], pads=[0, 0], ceil_mode=1),
    ]
    inputs = [helper.make_tensor_value_info('floor2', 1, [1, 1, 2])]
    outputs = [helper.make_tensor_value_info('maxpoo3', 1, [1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([3.0, 1.0], dtype=np.float32).reshape((1, 1, 2)),
]


def test_fuzz_e14d3592cb():
    assert check_model(build(), FEEDS, targets=('cpu',)) == []
