"""shape-prop and const-fold: partial shape values, splats held as one element, ConstantOfShape
from ONNX, and folding that never copies a weight that stays in use."""
import numpy as np
import pytest

from tensorforge.ir import Module, interpret, tensor, verify
from tensorforge.passes.graph.const_fold import fold_growth, fold_guarded
from tensorforge.passes.graph.shape_prop import partial_value, propagate_shapes, splat_dense

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from tensorforge.frontends.onnx import import_onnx  # noqa: E402


def test_partial_value_tracks_known_dims_through_gather_concat_and_arithmetic():
    m = Module()
    f = m.add_function("main", [tensor(("N", 12, 64))])
    g = f.builder().graph
    shape = g.shape_of(f.args[0])
    head = g.gather(shape, g.constant(np.array([0, 1], np.int64)))          # [N, 12]: half known
    rest = g.mul(g.gather(shape, g.constant(np.array([2], np.int64))), g.constant(np.array([2], np.int64)))
    full = g.concat(head, rest, axis=0)                                     # [N, 12, 128]
    f.set_return([full])
    p = partial_value(full)
    assert p.known.tolist() == [False, True, True] and p.values[1:].tolist() == [12, 128]
    assert not p.complete
    assert partial_value(rest).complete and partial_value(rest).values.tolist() == [128]


def test_shape_prop_folds_what_is_known_and_keeps_the_symbolic_rest():
    m = Module()
    f = m.add_function("main", [tensor(("N", 12, 64))])
    g = f.builder().graph
    shape = g.shape_of(f.args[0])
    d = g.gather(shape, g.constant(np.array(2, np.int64)))
    scale = g.sqrt(g.cast(d, dtype="f32"))
    f.set_return([g.div(f.args[0], scale), g.gather(shape, g.constant(np.array(0, np.int64)))])
    stats = propagate_shapes(m)
    verify(m)
    names = [op.name for op in m.main.body]
    assert stats.fired["partial-shape"] >= 1
    assert names.count("graph.shape_of") == 1 and "graph.sqrt" not in names and "graph.cast" not in names
    x = np.random.default_rng(0).normal(size=(3, 12, 64)).astype(np.float32)
    out, n = interpret(m, x)
    np.testing.assert_allclose(out, x / 8.0)
    assert int(n) == 3


def test_splats_are_zero_stride_views_whatever_their_shape():
    d = splat_dense(np.float32(0.5), tensor((4096, 4096)))
    assert d.array.strides == (0, 0) and d.is_splat and d.type == tensor((4096, 4096))
    m = Module()
    f = m.add_function("main", [])
    g = f.builder().graph
    f.set_return([g.expand(g.constant(np.float32(2.0)), shape=(1024, 512))])
    propagate_shapes(m)
    (const,) = [op for op in m.main.body if op.name == "graph.constant"]
    assert const.attributes["value"].array.strides == (0, 0)
    assert interpret(m)[0].shape == (1024, 512)


def _constant_of_shape_model() -> "onnx.ModelProto":
    """y = x + ConstantOfShape([300, 300]) * 2: the weights of the light_* models look like this."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [300, 300])
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])),
             helper.make_node("Mul", ["c", "two"], ["c2"]),
             helper.make_node("Add", ["x", "c2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [300, 300])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [300, 300])],
                              [shape, helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_constant_of_shape_from_onnx_becomes_one_splat_constant():
    m = import_onnx(_constant_of_shape_model())
    assert "graph.expand" in [op.name for op in m.main.body]
    propagate_shapes(m)
    verify(m)
    assert [op.name for op in m.main.body] == ["graph.constant", "graph.add", "func.return"]
    x = np.ones((300, 300), np.float32)
    np.testing.assert_allclose(interpret(m, x)[0], 1.5)


def _transposed_weight(shared: bool) -> Module:
    """matmul(x, transpose(W)) with a 300x300 W (above the fold limit), W also gathered if ``shared``."""
    m = Module()
    f = m.add_function("main", [tensor((4, 300)), tensor((4,), "i64")])
    g = f.builder().graph
    w = g.constant(np.arange(90000, dtype=np.float32).reshape(300, 300))
    y = g.matmul(f.args[0], g.transpose(w, perm=(1, 0)))
    f.set_return([y, g.gather(w, f.args[1])] if shared else [y])
    return m


@pytest.mark.parametrize("shared", [True, False])
def test_const_fold_counts_growth_and_keeps_shared_weights(shared):
    m = _transposed_weight(shared)
    transpose = next(op for op in m.main.body if op.name == "graph.transpose")
    assert fold_growth(transpose) == (360000 if shared else 0)     # a copy if W stays, else a re-layout
    before = m.clone()
    assert fold_guarded(m).changed is not shared
    verify(m)
    assert ("graph.transpose" in [op.name for op in m.main.body]) is shared
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(4, 300)).astype(np.float32), np.array([0, 5, -1, 299], np.int64)]
    for want, got in zip(interpret(before, *inputs), interpret(m, *inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
