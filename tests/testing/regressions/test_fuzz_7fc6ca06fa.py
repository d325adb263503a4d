"""Differential-fuzzer regression 7fc6ca06fa: interpreter error (ConvTranspose over an empty
spatial axis; fixed in dialects/graph/conv.py ``conv_transpose_nd``).

With an input spatial size of 0 and a stride > 1 the scatter's destination slice
``k*d : k*d + s*(0-1) + 1 : s`` has a negative stop, which NumPy reads from the end, so it
selected an element where the (empty) source has none. An empty input axis now scatters
nothing: the output is the bias alone (zeros here), as onnxruntime gives.

Found by python -m tensorforge.testing.fuzz --seed 7171 --cases 20000 --batch 16 and minimised; when found:
    s7171b439c5 [interpreter] error : IRError: interpreting 'graph.conv_transpose' at ConvTranspose_0 failed: ValueError: non-broadcastable output operand with shape (1,1,2,1,1) doesn't match the broadcast shape (1,1,2,0,1) at ir/interpreter.py:202 (ops ConvTranspose; specials -)
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
        helper.make_node('ConvTranspose', ['where8', 'c9'], ['convtr10'], strides=[2, 1], dilations=[2, 2]),
    ]
    inputs = [helper.make_tensor_value_info('where8', 1, [1, 1, 0, 1])]
    outputs = [helper.make_tensor_value_info('convtr10', 1, [1, 2, 3, 5])]
    inits = [
        numpy_helper.from_array(np.array([-1.781473159790039, 1.3034416437149048, 0.10620169341564178, -0.6389585137367249, -0.3564491271972656, 1.0525705814361572, -0.49971720576286316, 1.6186236143112183, -1.0722287893295288, 0.9791183471679688, 0.16642798483371735, 0.2945920526981354, -0.9852555394172668, 0.1666513979434967, -0.18389642238616943, 0.6920546889305115, 0.08665775507688522, -1.192400336265564], dtype=np.float32).reshape((1, 2, 3, 3)), 'c9'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([], dtype=np.float32).reshape((1, 1, 0, 1)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_7fc6ca06fa(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []
