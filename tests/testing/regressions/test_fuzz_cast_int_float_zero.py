"""Differential-fuzzer regression: float -> int -> float casts of values in (-1, 0) on cpu.

Found by python -m tensorforge.testing.fuzz --seed 4242 --cases 20000 --jobs 2 (batches 679, 822,
1194); when found:
    s4242b822c0 [cpu] inf s4242b822c0_pow16: got -inf, expected inf (ops Cast,Clip,Gather,IsNaN,Pow,Round,Sign,Sub,Where)
An integer converts to +0.0, but gcc (-fno-trapping-math, an SSE4.1 target) rewrites
``(float)(int)x`` as ``truncf(x)`` and ``(float)(int)rintf(x)`` as ``rintf(x)``, which keep the
sign of a zero result: 1 / Cast(Cast(-0.5, int), float) came out -inf.
"""
import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from tensorforge.testing.fuzz_check import check_model  # noqa: E402


def build():
    nodes = []
    outputs = []
    for k, to in enumerate((6, 3, 7)):          # int32, int8, int64
        nodes += [helper.make_node('Cast', ['x'], [f'i{k}'], to=to),
                  helper.make_node('Cast', [f'i{k}'], [f'f{k}'], to=1),
                  helper.make_node('Reciprocal', [f'f{k}'], [f'y{k}']),
                  helper.make_node('Round', ['x'], [f'r{k}']),
                  helper.make_node('Cast', [f'r{k}'], [f'ri{k}'], to=to),
                  helper.make_node('Cast', [f'ri{k}'], [f'rf{k}'], to=1),
                  helper.make_node('Reciprocal', [f'rf{k}'], [f'ry{k}'])]
        outputs += [helper.make_tensor_value_info(f'y{k}', 1, [6]), helper.make_tensor_value_info(f'ry{k}', 1, [6])]
    inputs = [helper.make_tensor_value_info('x', 1, [6])]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [np.array([-0.6, -0.3, -0.0, 0.4, -1.5, 2.0], dtype=np.float32)]


def test_fuzz_cast_int_float_zero():
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []
