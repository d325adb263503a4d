"""Differential-fuzzer regression 183a6bbe65: cpu value (GreaterOrEqual,Where): gcc 12 -O3 -march=znver1
miscompiled the short-circuit NaN-safe compare feeding a select (emit_loop._float_cmp now uses | and &).

Found by python -m tensorforge.testing.fuzz --seed 300 --cases 16 --batch 16 and minimised; when found:
    s300b13c8 [cpu] value s300b13c8_where8: 3/16 differ, e.g. at [0, 0, 2, 1]: got np.float32(0.0), expected np.float32(0.36) (rtol 1.0e-04, atol 1.00e-05) (ops GreaterOrEqual,Where; specials -)
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
        helper.make_node('GreaterOrEqual', ['in1', 'in5'], ['greate6']),
        helper.make_node('Where', ['greate6', 'in5', 'in7'], ['where8']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 2]), helper.make_tensor_value_info('in5', 1, [1, 2, 4, 2]), helper.make_tensor_value_info('in7', 1, [1, 2, 4, 2])]
    outputs = [helper.make_tensor_value_info('where8', 1, [1, 2, 4, 2])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.800000011920929, 0.10999999940395355], dtype=np.float32).reshape((1, 1, 1, 2)),
    np.array([1.9900000095367432, -2.180000066757202, -0.9800000190734863, 2.3299999237060547, 3.4700000286102295, 2.130000114440918, 1.059999942779541, 0.5099999904632568, -3.619999885559082, -0.8199999928474426, 5.489999771118164, -0.800000011920929, -4.03000020980835, 0.7599999904632568, -1.4800000190734863, -1.850000023841858], dtype=np.float32).reshape((1, 2, 4, 2)),
    np.array([-1.190000057220459, 0.6399999856948853, -2.0199999809265137, -0.1599999964237213, -0.009999999776482582, 0.36000001430511475, -0.800000011920929, -0.5600000023841858, -2.049999952316284, 1.2100000381469727, -0.30000001192092896, -1.2100000381469727, 1.2200000286102295, -0.8700000047683716, -0.6499999761581421, -0.09000000357627869], dtype=np.float32).reshape((1, 2, 4, 2)),
]


def test_fuzz_183a6bbe65():
    assert check_model(build(), FEEDS, targets=('cpu',)) == []
