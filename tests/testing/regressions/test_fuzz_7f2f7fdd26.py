"""Differential-fuzzer regression 7f2f7fdd26: interpreter error (MaxPool).

Found by python -m tensorforge.testing.fuzz --seed 100 --cases 8000 --batch 16 and minimised; when found:
    s100b465c8 [interpreter] error : FrontendError: ONNX node 'MaxPool_0' (MaxPool, opset 23): 'graph.max_pool' at MaxPool_0: spatial axis 1: window extent 3 is larger than the padded input 1 (input 1, pads 0+0) (operands: tensor<1x1x6x1xf32>) at frontends/onnx_ops/importer.py:229 (ops MaxPool; specials -)
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
        helper.make_node('MaxPool', ['in1'], ['maxpoo2'], kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 2]),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 6, 1])]
    outputs = [helper.make_tensor_value_info('maxpoo2', 1, [1, 1, 2, 0])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-1.6699999570846558, 0.12999999523162842, 0.23000000417232513, 0.2800000011920929, -0.009999999776482582, 0.8799999952316284], dtype=np.float32).reshape((1, 1, 6, 1)),
]


# A valid MaxPool (onnxruntime runs it: output [1,1,2,0]) whose dilated window (extent 3) does not
# fit the input (1) on one axis: the ONNX importer / graph.max_pool verifier raises FrontendError
# 'window extent 3 is larger than the padded input' instead of producing the empty result.
def test_fuzz_7f2f7fdd26():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
