"""Differential-fuzzer regression: GlobalMaxPool over an empty spatial extent on the interpreter.

Found by python -m tensorforge.testing.fuzz --seed 5151 --cases 20000 --jobs 2; when found:
    s5151b324c6 [interpreter] error : IRError: interpreting 'graph.global_max_pool' at GlobalMaxPool_5 failed: ValueError: zero-size array to reduction operation maximum which has no identity
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
        helper.make_node('Div', ['in2', 'in1'], ['div3']),
        helper.make_node('CumSum', ['div3', 'c4'], ['cumsum5'], exclusive=1, reverse=1),
        helper.make_node('AveragePool', ['in6'], ['averag7'], kernel_shape=[2, 2], strides=[2, 1], ceil_mode=1),
        helper.make_node('ReduceLogSumExp', ['cumsum5', 'c8'], ['reduce9'], keepdims=1),
        helper.make_node('Slice', ['averag7', 'c10', 'c11', 'c12', 'c13'], ['slice14']),
        helper.make_node('GlobalMaxPool', ['slice14'], ['global15']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [3, 1]), helper.make_tensor_value_info('in2', 1, []), helper.make_tensor_value_info('in6', 1, [2, 2, 2, 2])]
    outputs = [helper.make_tensor_value_info('reduce9', 1, [1, 1]), helper.make_tensor_value_info('global15', 1, [0, 2, 1, 1])]
    inits = [
        numpy_helper.from_array(np.array([-1], dtype=np.int64).reshape(()), 'c4'),
        numpy_helper.from_array(np.array([0, 1], dtype=np.int64).reshape((2,)), 'c8'),
        numpy_helper.from_array(np.array([-1, 2], dtype=np.int64).reshape((2,)), 'c10'),
        numpy_helper.from_array(np.array([0, 3], dtype=np.int64).reshape((2,)), 'c11'),
        numpy_helper.from_array(np.array([0, 2], dtype=np.int64).reshape((2,)), 'c12'),
        numpy_helper.from_array(np.array([1, 1], dtype=np.int64).reshape((2,)), 'c13'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.07964107394218445, 0.18074746429920197, 0.29335924983024597], dtype=np.float32).reshape((3, 1)),
    np.array([0.01694626361131668], dtype=np.float32).reshape(()),
    np.array([-1.86433744430542, -0.672050416469574, -0.9491931200027466, -0.30706799030303955, 0.4451763331890106, -0.5753570199012756, 1.4223812818527222, -0.3900180160999298, -0.6926453709602356, -0.746093213558197, 0.5593574643135071, 0.20577837526798248, -0.6251216530799866, -1.147183895111084, 2.368828058242798, 0.7354477047920227], dtype=np.float32).reshape((2, 2, 2, 2)),
]


# NumPy's max over nothing raises; the interpreter now starts from the type's lowest value (-inf),
# as the native reduction does.
def test_fuzz_global_max_pool_empty():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
