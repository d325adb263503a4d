"""ONNX If / Loop / Scan against onnxruntime, on the interpreter and on native code."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorforge

ort = pytest.importorskip("onnxruntime")
TARGETS = ("interpreter", "cpu")


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    g = helper.make_graph(nodes, "cf", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check(model, feeds, target, rtol=1e-5):
    want = _ort(model, feeds)
    cm = tensorforge.compile(model, target=target)
    got = cm(*feeds.values())
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-6)
    return cm


def _if_model():
    """y = if c: relu(x) * 2 (4 values) else: concat(x, x) (8 values): branches differ in shape."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    then_g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Constant", [], ["k"], value=two),
         helper.make_node("Mul", ["r", "k"], ["t"])],
        "then", [], [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["e"], axis=0)], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _model([node], [c, x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("target", TARGETS)
def test_if_with_branches_of_different_shapes(target):
    model = _if_model()
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    for c in (True, False):
        _check(model, {"c": np.array(c), "x": x}, target)
    module = tensorforge.import_model(model)
    ifs = [op for op in module.walk() if op.name == "graph.if"]
    assert len(ifs) == 1 and isinstance(ifs[0].results[0].type.shape[0], str)   # a run-time size


def test_if_with_a_constant_condition_is_inlined():
    from tensorforge.frontends.onnx import import_onnx
    model = _if_model()
    module = import_onnx(model, bind_inputs={"c": np.array(False)})
    assert not any(op.name == "graph.if" for op in module.walk())
    assert module.main.outputs[0].type.shape == (8,)


def _loop_model():
    """Loop (trip count M from an input, cond from the body): s = s * 0.5 + x; stops when
    sum(s) < limit; scan output: every s."""
    i64 = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["half"], value=helper.make_tensor("h", TensorProto.FLOAT, [], [0.5])),
         helper.make_node("Mul", ["s_in", "half"], ["sh"]),
         helper.make_node("Add", ["sh", "x"], ["s_out"]),
         helper.make_node("ReduceSum", ["s_out"], ["tot"], keepdims=0),
         helper.make_node("Less", ["tot", "limit"], ["cond_out"]),
         helper.make_node("Identity", ["s_out"], ["scan_out"])],
        "body",
        [i64("i", TensorProto.INT64, []), i64("cond_in", TensorProto.BOOL, []),
         i64("s_in", TensorProto.FLOAT, [3])],
        [i64("cond_out", TensorProto.BOOL, []), i64("s_out", TensorProto.FLOAT, [3]),
         i64("scan_out", TensorProto.FLOAT, [3])])
    node = helper.make_node("Loop", ["M", "c0", "s0"], ["s_final", "s_all"], body=body)
    return _model([node], [i64("M", TensorProto.INT64, []), i64("c0", TensorProto.BOOL, []),
                           i64("s0", TensorProto.FLOAT, [3]), i64("x", TensorProto.FLOAT, [3]),
                           i64("limit", TensorProto.FLOAT, [])],
                  [i64("s_final", TensorProto.FLOAT, [3]), i64("s_all", TensorProto.FLOAT, None)])


@pytest.mark.parametrize("target", TARGETS)
def test_loop_with_condition_and_scan_output(target):
    model = _loop_model()
    s0 = np.array([1.0, -2.0, 0.5], np.float32)
    x = np.array([0.25, 0.5, 1.0], np.float32)
    cm = None
    for m, limit in ((10, 100.0), (10, 3.0), (0, 100.0), (4, 100.0)):
        feeds = {"M": np.array(m, np.int64), "c0": np.array(True), "s0": s0, "x": x,
                 "limit": np.array(limit, np.float32)}
        cm = _check(model, feeds, target) if cm is None else cm
        got, want = cm(*feeds.values()), _ort(model, feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5)


def _scan_model():
    """Scan-9, two states (running sum and running max) over axis 1, reverse; output axis 0."""
    vi = helper.make_tensor_value_info
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "xt"], ["acc_out"]), helper.make_node("Max", ["mx", "xt"], ["mx_out"]),
         helper.make_node("Mul", ["acc_out", "mx_out"], ["y"])],
        "body", [vi("acc", TensorProto.FLOAT, [2]), vi("mx", TensorProto.FLOAT, [2]), vi("xt", TensorProto.FLOAT, [2])],
        [vi("acc_out", TensorProto.FLOAT, [2]), vi("mx_out", TensorProto.FLOAT, [2]), vi("y", TensorProto.FLOAT, [2])])
    node = helper.make_node("Scan", ["a0", "m0", "xs"], ["a", "m", "ys"], body=body, num_scan_inputs=1,
                            scan_input_axes=[1], scan_input_directions=[1])
    return _model([node], [vi("a0", TensorProto.FLOAT, [2]), vi("m0", TensorProto.FLOAT, [2]),
                           vi("xs", TensorProto.FLOAT, [2, 5])],
                  [vi("a", TensorProto.FLOAT, [2]), vi("m", TensorProto.FLOAT, [2]),
                   vi("ys", TensorProto.FLOAT, [5, 2])])


@pytest.mark.parametrize("target", TARGETS)
def test_scan_two_states_reverse(target):
    rng = np.random.default_rng(0)
    feeds = {"a0": np.zeros(2, np.float32), "m0": np.full(2, -10, np.float32),
             "xs": rng.standard_normal((2, 5)).astype(np.float32)}
    _check(_scan_model(), feeds, target)


def test_nested_if_inside_loop_body_native():
    """A loop body holding an If whose condition is the iteration parity: bodies of bodies
    compile natively too."""
    vi = helper.make_tensor_value_info
    two = helper.make_tensor("two", TensorProto.INT64, [], [2])
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    then_g = helper.make_graph([helper.make_node("Add", ["s_in", "x"], ["t"])], "then", [],
                               [vi("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["s_in", "x"], ["e"])], "else", [],
                               [vi("e", TensorProto.FLOAT, [3])])
    body = helper.make_graph(
        [helper.make_node("Constant", [], ["two"], value=two), helper.make_node("Constant", [], ["zero"], value=zero),
         helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["even"]),
         helper.make_node("If", ["even"], ["s_out"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []), vi("s_in", TensorProto.FLOAT, [3])],
        [vi("cond_out", TensorProto.BOOL, []), vi("s_out", TensorProto.FLOAT, [3])])
    model = _model([helper.make_node("Loop", ["M", "", "s0"], ["s"], body=body)],
                   [vi("M", TensorProto.INT64, []), vi("s0", TensorProto.FLOAT, [3]), vi("x", TensorProto.FLOAT, [3])],
                   [vi("s", TensorProto.FLOAT, [3])])
    feeds = {"M": np.array(5, np.int64), "s0": np.zeros(3, np.float32), "x": np.array([1, 2, 3], np.float32)}
    for target in TARGETS:
        _check(model, feeds, target)
