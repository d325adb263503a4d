"""Library kernels (codegen/c/library_kernels.py) against the reference interpreter, bit for bit.

Each model holds several variants of one data-dependent op side by side (one C compile), runs on
random inputs drawn from a few values (many duplicates and ties, NaN, -0.0, 0) and must return
exactly what the interpreter returns: same shapes, same values, NaNs in the same places.
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import tensorforge  # noqa: E402
from tensorforge.passes.lower.graph_to_kernels import is_library_kernel, lower_function  # noqa: E402

RUNS = 8
VALUES = np.array([-1.0, 0.0, -0.0, 1.0, 2.0, np.nan], np.float32)


def _model(nodes, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, dtype, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _compare(model, draw, runs=RUNS):
    native = tensorforge.compile(model, threads=1)
    ref = tensorforge.compile(model, target="interpreter")
    assert native.native is not None
    rng = np.random.default_rng(0)
    names = [o.name for o in model.graph.output]
    for _ in range(runs):
        xs = draw(rng)
        got, want = native.run(*xs), ref.run(*xs)
        for name, g, w in zip(names, got, want):
            g, w = np.asarray(g), np.asarray(w)
            assert g.shape == w.shape, f"{name}: shape {g.shape} != {w.shape} for inputs {xs}"
            assert g.dtype == w.dtype, f"{name}: dtype {g.dtype} != {w.dtype}"
            np.testing.assert_array_equal(g, w, err_msg=f"{name} for inputs {xs}")
            if g.dtype.kind == "f":     # -0.0 vs 0.0: the first occurrence's sign
                np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=f"{name} signs")
    return native


def test_unique_variants():
    variants = [("a", None, 1), ("a", None, 0), ("b", 0, 1), ("b", 1, 0), ("c", -1, 1), ("c", 1, 0), ("d", None, 0),
                ("d", None, 1), ("e", 0, 0)]
    nodes, outputs = [], []
    for k, (x, axis, srt) in enumerate(variants):
        outs = [f"y{k}", f"i{k}", f"inv{k}", f"c{k}"]
        kw = {} if axis is None else {"axis": axis}
        nodes.append(helper.make_node("Unique", [x], outs, sorted=srt, **kw))
        dt = T.INT64 if x == "d" else (T.DOUBLE if x == "e" else T.FLOAT)
        outputs += [_vi(outs[0], dt)] + [_vi(o, T.INT64) for o in outs[1:]]
    model = _model(nodes, [_vi("a", T.FLOAT, [3, 4]), _vi("b", T.FLOAT, [6, 2]), _vi("c", T.FLOAT, [2, 5, 2]),
                           _vi("d", T.INT64, [9]), _vi("e", T.DOUBLE, [5, 2])], outputs)

    def draw(rng):
        f = lambda shape, vals=VALUES: rng.choice(vals[: rng.integers(2, len(vals) + 1)], shape)  # noqa: E731
        return [f((3, 4)), f((6, 2)), f((2, 5, 2)), rng.integers(-3, 3, 9).astype(np.int64),
                f((5, 2)).astype(np.float64)]
    _compare(model, draw)


def test_nonzero_and_compress_variants():
    nodes = [helper.make_node("NonZero", ["x"], ["nz_x"]),
             helper.make_node("NonZero", ["m"], ["nz_m"]),
             helper.make_node("NonZero", ["k"], ["nz_k"]),
             helper.make_node("Compress", ["x", "cond"], ["c_flat"]),
             helper.make_node("Compress", ["x", "cond"], ["c_0"], axis=0),
             helper.make_node("Compress", ["x", "short"], ["c_1"], axis=1),
             helper.make_node("Compress", ["x", "short"], ["c_m1"], axis=-1)]
    model = _model(nodes, [_vi("x", T.FLOAT, [4, 5, 3]), _vi("m", T.BOOL, [7]), _vi("k", T.INT32, [3, 3]),
                           _vi("cond", T.BOOL, [4]), _vi("short", T.BOOL, [2])],
                   [_vi(n, T.INT64) for n in ("nz_x", "nz_m", "nz_k")] + [_vi(n, T.FLOAT) for n in
                                                                          ("c_flat", "c_0", "c_1", "c_m1")])

    def draw(rng):
        p = rng.random()
        return [rng.choice(VALUES, (4, 5, 3)), rng.random(7) < p, rng.integers(-1, 2, (3, 3)).astype(np.int32),
                rng.random(4) < p, rng.random(2) < 0.5]
    _compare(model, draw)


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_with_runtime_thresholds(center):
    """Limit and thresholds are model inputs: one library for any values, including the edges
    (limit 0, iou threshold 0 and 1, NaN scores, identical boxes, tied scores)."""
    inputs = ["boxes", "scores", "limit", "iou", "score"]
    nodes = [helper.make_node("NonMaxSuppression", inputs, ["sel"], center_point_box=center),
             helper.make_node("NonMaxSuppression", inputs[:3], ["sel_no_thresholds"], center_point_box=center)]
    model = _model(nodes, [_vi("boxes", T.FLOAT, [2, 10, 4]), _vi("scores", T.FLOAT, [2, 3, 10]),
                           _vi("limit", T.INT64, [1]), _vi("iou", T.FLOAT, [1]), _vi("score", T.FLOAT, [1])],
                   [_vi("sel", T.INT64), _vi("sel_no_thresholds", T.INT64)])

    def draw(rng):
        boxes = rng.integers(0, 5, (2, 10, 4)).astype(np.float32) / 2
        boxes[:, 3] = boxes[:, 2]                      # identical boxes
        scores = rng.choice(np.array([0.1, 0.5, 0.5, 0.9, 0.0, np.nan], np.float32), (2, 3, 10))
        return [boxes, scores, np.array([rng.choice([0, 1, 3, 100])], np.int64),
                np.array([rng.choice([0.0, 0.25, 0.5, 1.0])], np.float32),
                np.array([rng.choice([0.0, 0.1, 0.5])], np.float32)]
    _compare(model, draw, runs=12)


def test_library_kernels_are_opaque_and_carry_their_bounds():
    from tensorforge.api import import_model
    from tensorforge.ir.symbolic import symbol_table_of
    model = _model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["nz"]),
                    helper.make_node("Neg", ["nz"], ["y"])],
                   [_vi("x", T.FLOAT, [2, 3])], [_vi("y", T.INT64)])
    module = import_model(model)
    func = module.main
    lower_function(func)
    kernels = [op for op in func.body if op.name == "structured.kernel"]
    library = [k for k in kernels if is_library_kernel(k)]
    assert len(kernels) == 3 and len(library) == 1           # nothing fused into it
    assert library[0].attributes["tf.fusion"] == "opaque"
    r = symbol_table_of(func).get("nonzero0")
    assert (r.lo, r.hi, r.bound) == (0, 6, 6)
