"""Differential-fuzzer regression 557ab0fe5e: interpreter nan (MaxPool).

Found by python -m tensorforge.testing.fuzz --seed 7 --first-batch 12 --cases 16 --batch 16 (case 5) and minimised; when found:
    s7b12c5 [interpreter] nan s7b12c5_maxpoo2: 1/1 differ, e.g. at [0, 0, 0, 0]: got np.float32(nan), expected np.float32(-3.4028235e+38) (ops MaxPool; specials nan)
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
        helper.make_node('MaxPool', ['in1'], ['maxpoo2'], kernel_shape=[1, 3], strides=[1, 1], pads=[0, 1, 0, 1]),
    ]
    inputs = [helper.make_tensor_value_info('in1', 1, [1, 1, 1, 1])]
    outputs = [helper.make_tensor_value_info('maxpoo2', 1, [1, 1, 1, 1])]
    inits = [
    ]
    graph = helper.make_graph(nodes, "fuzz", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


FEEDS = [
    np.array([nan], dtype=np.float32).reshape((1, 1, 1, 1)),
]


# ONNX semantics (onnxruntime, and onnx.reference which drops NaN before the max) ignore NaN in
# MaxPool: a window holding only NaN and padding gives -FLT_MAX in onnxruntime.  The ONNX spec is
# silent; tensorforge follows PyTorch (docs/numerics.md): max pooling propagates NaN on both
# targets, and a window of -inf and padding gives -inf.  The fuzzer reports this as a documented
# deviation (fuzz_known.DOCUMENTED), not as an open mismatch.

def _max_pool_ref(x, kernel, pads):
    """PyTorch's max_pool semantics in NumPy: padding is -inf, NaN propagates (np.max)."""
    n = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[i + n]) for i in range(n)], constant_values=-np.inf)
    v = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=(2, 3))
    return v.max(axis=(-2, -1))


def _run(model, feeds, target):
    import tensorforge
    cm = tensorforge.compile(model, target=target)
    with np.errstate(all="ignore"):
        return [np.asarray(o) for o in cm.run(*feeds)]


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_fuzz_557ab0fe5e(target):
    (got,) = _run(build(), FEEDS, target)
    assert got.shape == (1, 1, 1, 1) and np.isnan(got).all()


def _pool_model(op, shape, **attrs):
    nodes = [helper.make_node(op, ['x'], ['y'], **attrs)]
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info('x', 1, list(shape))],
                          [helper.make_tensor_value_info('y', 1, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_max_pool_follows_pytorch(target):
    x = np.array([[1, nan, 2, 3, 0], [-inf, -inf, 5, -1, 4]], np.float32).reshape(1, 1, 2, 5)
    kernel, pads = (1, 2), (0, 1, 0, 1)
    (got,) = _run(_pool_model("MaxPool", x.shape, kernel_shape=list(kernel), pads=list(pads)), [x], target)
    want = _max_pool_ref(x, kernel, pads)
    assert np.isnan(want).any() and np.isneginf(want).any()
    np.testing.assert_array_equal(got, want)        # NaN where the reference has NaN, -inf kept
    (g,) = _run(_pool_model("GlobalMaxPool", x.shape), [x], target)
    np.testing.assert_array_equal(g, np.max(x, axis=(2, 3), keepdims=True))   # NaN propagates


def test_fuzzer_reports_a_documented_deviation():
    from tensorforge.testing.fuzz_check import case_from_model, check_cases
    found = check_cases([case_from_model(build(), FEEDS)], targets=("interpreter",))
    assert found and all(m.kind == "documented-deviation" for m in found)
    assert check_model(build(), FEEDS, targets=('cpu', 'interpreter')) == []


def test_a_compare_after_max_pool_nan_is_documented_too():
    """Found by the fuzzer (seed 300, batch 12) and minimised: MaxPool -> LessOrEqual with NaN/-inf
    inputs; the comparison sees NaN (PyTorch) where onnxruntime sees a number."""
    from tensorforge.testing.fuzz_check import case_from_model, check_cases
    nodes = [helper.make_node('MaxPool', ['x'], ['p'], kernel_shape=[1, 2]),
             helper.make_node('LessOrEqual', ['p', 'z'], ['y'])]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info('x', 1, [1, 1, 1, 3]),
                                       helper.make_tensor_value_info('z', 1, [1, 1, 1, 2])],
                          [helper.make_tensor_value_info('y', 9, [1, 1, 1, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    feeds = [np.array([nan, -1.0, 2.0], np.float32).reshape(1, 1, 1, 3), np.full((1, 1, 1, 2), 5.0, np.float32)]
    found = check_cases([case_from_model(m, feeds)], targets=("interpreter", "cpu"))
    assert found and all(m.kind == "documented-deviation" for m in found)
