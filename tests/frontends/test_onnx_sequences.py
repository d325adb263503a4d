"""ONNX sequences and optionals (resolved at import; lists and None at the model boundary),
against onnxruntime / the onnx reference, on the interpreter and on native code."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorforge

TARGETS = ("interpreter", "cpu")
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, opset=17):
    m = helper.make_model(helper.make_graph(nodes, "seq", inputs, outputs),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_split_at_length_concat(target):
    """SplitToSequence -> SequenceErase/SequenceInsert/SequenceAt -> ConcatFromSequence, SequenceLength."""
    ort = pytest.importorskip("onnxruntime")
    nodes = [
        helper.make_node("SplitToSequence", ["x"], ["seq"], axis=1),            # 4 pieces of [2,1,3]
        helper.make_node("Constant", [], ["p"], value=helper.make_tensor("p", TensorProto.INT64, [], [-1])),
        helper.make_node("SequenceErase", ["seq", "p"], ["seq2"]),
        helper.make_node("Constant", [], ["z"], value=helper.make_tensor("z", TensorProto.INT64, [], [0])),
        helper.make_node("SequenceAt", ["seq2", "z"], ["first"]),
        helper.make_node("Neg", ["first"], ["nf"]),
        helper.make_node("SequenceInsert", ["seq2", "nf", "z"], ["seq3"]),
        helper.make_node("ConcatFromSequence", ["seq3"], ["y"], axis=1),
        helper.make_node("ConcatFromSequence", ["seq3"], ["stacked"], axis=0, new_axis=1),
        helper.make_node("SequenceLength", ["seq3"], ["n"]),
    ]
    model = _model(nodes, [vi("x", TensorProto.FLOAT, [2, 4, 3])],
                   [vi("y", TensorProto.FLOAT, None), vi("stacked", TensorProto.FLOAT, None),
                    vi("n", TensorProto.INT64, [])])
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = tensorforge.compile(model, target=target)(x)
    for g, w in zip(got, want):
        _same(np.asarray(g), w)


@pytest.mark.parametrize("target", TARGETS)
def test_sequence_input_and_output(target):
    """A sequence-typed model input (a list) and output (a list): one compile per length."""
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    nodes = [helper.make_node("SequenceInsert", ["s", "t"], ["s2"]),
             helper.make_node("ConcatFromSequence", ["s2"], ["c"], axis=0)]
    model = _model(nodes, [helper.make_value_info("s", seq_t), vi("t", TensorProto.FLOAT, [2])],
                   [helper.make_value_info("s2", seq_t), vi("c", TensorProto.FLOAT, None)])
    ref = ReferenceEvaluator(model)
    cm = tensorforge.compile(model, target=target)
    t = np.array([7, 8], np.float32)
    for n in (1, 3, 1):
        s = [np.full(2, i, np.float32) for i in range(n)]
        got = cm(s, t)
        want = ref.run(None, {"s": s, "t": t})
        _same(got[0], want[0])
        _same(got[1], want[1])


@pytest.mark.parametrize("target", TARGETS)
def test_optional_input_present_and_empty(target):
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [3]))
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"])]
    model = _model(nodes, [helper.make_value_info("o", opt_t)], [vi("has", TensorProto.BOOL, [])], opset=18)
    cm = tensorforge.compile(model, target=target)
    assert bool(cm(np.ones(3, np.float32))) is True
    assert bool(cm(None)) is False


@pytest.mark.parametrize("target", TARGETS)
def test_sequence_map_inlined_per_element(target):
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    body = helper.make_graph([helper.make_node("Mul", ["a", "a"], ["b"])], "body",
                             [vi("a", TensorProto.FLOAT, None)], [vi("b", TensorProto.FLOAT, None)])
    model = _model([helper.make_node("SequenceMap", ["s"], ["r"], body=body)], [helper.make_value_info("s", seq_t)],
                   [helper.make_value_info("r", seq_t)])
    s = [np.arange(3, dtype=np.float32), np.arange(5, dtype=np.float32) - 2]
    got = tensorforge.compile(model, target=target)(s)
    _same(got, ReferenceEvaluator(model).run(None, {"s": s})[0])
