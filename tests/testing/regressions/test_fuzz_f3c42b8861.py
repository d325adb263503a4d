"""Differential-fuzzer regression f3c42b8861: cpu inf (CumSum,Reciprocal).

Found by python -m tensorforge.testing.fuzz --seed 7171 --cases 20000 --batch 16 and minimised; when found:
    s7171b392c7 [cpu] inf s7171b392c7_recipr9: 1/1 differ, e.g. at [0]: got np.float32(inf), expected np.float32(-inf) (ops CumSum,Reciprocal; specials -0)

Root cause: the cpu lowering of CumSum (passes/lower/to_structured/reduce.py) sums a triangle of
the scanned axis from an accumulator that started at +0.0, with +0.0 for the positions outside
the triangle, so a prefix of only -0.0 summed to +0.0 (+0.0 + -0.0 == +0.0), and 1/cumsum gave
+inf.  Fix: a structured.compute may now carry an ``init`` (the accumulator's start value); the
cumsum starts from -0.0, the IEEE identity of addition, and adds -0.0 outside the triangle, so
its results are the running sums np.cumsum, onnxruntime and onnx.reference give (an exclusive
scan's empty prefix stays +0.0, as in onnx.reference and the interpreter).  The interpreter
(np.cumsum) was already right.
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
        helper.make_node('CumSum', ['in1', 'c4'], ['cumsum5'], exclusive=0, reverse=0),
        helper.make_node('Reciprocal', ['cumsum5'], ['recipr9']),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1])]
    outputs = [helper.make_tensor_value_info('recipr9', 1, [1])]
    inits = [
        numpy_helper.from_array(np.array([0], dtype=np.int64).reshape(()), 'c4'),
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


FEEDS = [
    np.array([-0.0], dtype=np.float32).reshape((1,)),
]


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_fuzz_f3c42b8861(target):
    assert check_model(build(), FEEDS, targets=(target,)) == []


def _cumsum_model(shape, axis, exclusive, reverse):
    nodes = [helper.make_node('CumSum', ['x', 'ax'], ['y'], exclusive=exclusive, reverse=reverse)]
    graph = helper.make_graph(nodes, "cumsum", [helper.make_tensor_value_info('x', 1, list(shape))],
                              [helper.make_tensor_value_info('y', 1, list(shape))],
                              [numpy_helper.from_array(np.array(axis, dtype=np.int64), 'ax')])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, 1])
def test_cumsum_signed_zero_modes(target, exclusive, reverse, axis):
    """Every mode keeps the sign of a sum of only -0.0 (as onnx.reference: np.cumsum, shifted with a
    +0.0 for the exclusive scan's empty prefix), over an outer and over the innermost axis (there
    gcc 12's loop if-conversion turned the -0.0 select of the triangle into a masked add of +0.0:
    such kernels are compiled without it, emit_loop._no_if_conversion)."""
    from onnx.reference import ReferenceEvaluator
    import tensorforge
    x = np.array([[-0.0, -0.0, 1.0], [-0.0, 2.0, -1.0], [-0.0, -0.0, -0.0], [-0.0, -2.0, 0.0]], dtype=np.float32)
    x = np.tile(x, (1, 12)) if axis else np.tile(x, (12, 1))      # 36 long: the loop vectorizes
    model = _cumsum_model(x.shape, axis, exclusive, reverse)
    want = ReferenceEvaluator(model).run(None, {'x': x})[0]
    got = np.asarray(tensorforge.compile(model, target=target).run(x)[0])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
