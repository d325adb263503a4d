"""graph dialect data-movement ops (shape.py): interpreter vs NumPy / onnxruntime, shape errors.

Also holds the small harness (build-and-interpret, one-node ONNX models) that
test_graph_index.py imports.
"""
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorforge.errors import IRError, ShapeError, VerificationError
from tensorforge.ir import DType, Module, interpret, lookup, make_op, tensor, verify
from tensorforge.ir.core import Operation

RTOL = 1e-5
INT64_MAX = 2 ** 63 - 1
INT64_MIN = -(2 ** 63)


# ---- harness -----------------------------------------------------------------------------

def run_graph(inputs, build, types=None):
    """Builds ``main(inputs) = build(g, *args)`` with the builder, verifies it and interprets it.

    ``types`` overrides the argument types (for symbolic dims); results always come back as a list.
    """
    types = types or [tensor(a.shape, DType.from_np(a.dtype)) for a in inputs]
    m = Module()
    f = m.add_function("main", types)
    g = f.builder().graph
    out = build(g, *f.args)
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    f.set_return(outs)
    verify(m)
    results = interpret(m, *inputs)
    for v, r in zip(outs, results):   # the interpreter agrees with the inferred types
        assert r.dtype == v.type.dtype.np
        assert all(isinstance(d, str) or d == n for d, n in zip(v.type.shape, r.shape)), (v.type, r.shape)
    return results


def build_error(x_type, build, match):
    """Building the op on an argument of ``x_type`` raises a ShapeError matching ``match``."""
    m = Module()
    f = m.add_function("main", x_type if isinstance(x_type, list) else [x_type])
    g = f.builder().graph
    with pytest.raises(ShapeError, match=match):
        build(g, *f.args)


_ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float64): TensorProto.DOUBLE,
               np.dtype(np.int64): TensorProto.INT64, np.dtype(np.int32): TensorProto.INT32,
               np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.uint8): TensorProto.UINT8}


def onnx_run(op_type, inputs, attrs=None, constants=None, n_outputs=1, opset=19):
    """Runs one ONNX node in onnxruntime: ``inputs`` are graph inputs (name -> array),
    ``constants`` initializers; names are taken in the order inputs then constants, with
    None for an omitted optional input."""
    constants = constants or {}
    names = [n if a is not None else "" for n, a in list(inputs.items()) + list(constants.items())]
    node = helper.make_node(op_type, names, [f"y{i}" for i in range(n_outputs)], **(attrs or {}))
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(n, _ONNX_TYPES[a.dtype], a.shape) for n, a in inputs.items()],
        [onnx.ValueInfoProto(name=f"y{i}") for i in range(n_outputs)],
        [numpy_helper.from_array(a, n) for n, a in constants.items() if a is not None])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def i64(*v):
    return np.asarray(v, dtype=np.int64)


@pytest.fixture
def x234(rng):
    return rng.standard_normal((2, 3, 4)).astype(np.float32)


# ---- reshape / flatten ---------------------------------------------------------------------

def test_reshape_matches_numpy(x234):
    (y,) = run_graph([x234], lambda g, x: g.reshape(x, shape=(4, 6)))
    np.testing.assert_array_equal(y, x234.reshape(4, 6))


def test_reshape_symbolic_dims_bind_from_inputs(rng):
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)
    y, z = run_graph([x], lambda g, a: [g.reshape(a, shape=("N", "L", 4, 6)),
                                       g.reshape(a, shape=("N", 120))],
                     types=[tensor(("N", "L", 24))])
    np.testing.assert_array_equal(y, x.reshape(2, 5, 4, 6))
    np.testing.assert_array_equal(z, x.reshape(2, 120))


def test_reshape_single_symbol_solved_from_element_count(x234):
    # Outside the interpreter no symbol is bound: one unknown is solved like ONNX's -1.
    d = lookup("graph.reshape")
    (y,) = d.evaluate([x234], {"shape": ("M", 4)}, [tensor(("M", 4))])
    np.testing.assert_array_equal(y, x234.reshape(6, 4))
    with pytest.raises(ShapeError, match="'M', 'K'"):
        d.evaluate([x234], {"shape": ("M", "K")}, [tensor(("M", "K"))])


@pytest.mark.parametrize("shape, match", [
    ((-1, 5), r"does not divide the \(2, 3, 4\) input"),
    ((-2, 12), r"shape\[0\] = -2: only -1"),
    ((-1, -1), "more than one -1"),
    ((5, 5), "different number of elements"),
    ((0, 24), r"shape\[0\] = 0.*copy-dim"),
])
def test_reshape_errors(shape, match):
    build_error(tensor((2, 3, 4)), lambda g, x: g.reshape(x, shape=shape), match)


def test_reshape_symbolic_count_mismatch():
    build_error(tensor(("N", 3, 4)), lambda g, x: g.reshape(x, shape=("N", 13)), "different number")


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2, 3])
def test_flatten_matches_onnx(x234, axis):
    (y,) = run_graph([x234], lambda g, x: g.flatten(x, axis=axis))
    (ref,) = onnx_run("Flatten", {"x": x234}, {"axis": axis})
    np.testing.assert_array_equal(y, ref)


def test_flatten_symbolic():
    m = Module()
    f = m.add_function("main", [tensor(("N", 3, 4))])
    g = f.builder().graph
    assert g.flatten(f.args[0]).type == tensor(("N", 12))
    assert g.flatten(f.args[0], axis=2).type == tensor(("3*N", 4))
    with pytest.raises(ShapeError, match=r"axis 4 is out of range \[-3, 3\]"):
        g.flatten(f.args[0], axis=4)


# ---- squeeze / unsqueeze / expand / transpose / tile ----------------------------------------

def test_squeeze_unsqueeze_match_numpy(rng):
    x = rng.standard_normal((1, 3, 1, 4)).astype(np.float32)
    a, b, c, d = run_graph([x], lambda g, v: [g.squeeze(v, axes=(0, -2)), g.squeeze(v, axes=()),
                                             g.unsqueeze(v, axes=(0, -1)), g.unsqueeze(v, axes=(2, 4))])
    np.testing.assert_array_equal(a, x.reshape(3, 4))
    np.testing.assert_array_equal(b, x)
    np.testing.assert_array_equal(c, x.reshape(1, 1, 3, 1, 4, 1))
    np.testing.assert_array_equal(d, np.expand_dims(x, (2, 4)))
    (ref,) = onnx_run("Unsqueeze", {"x": x}, constants={"axes": i64(2, 4)})
    np.testing.assert_array_equal(d, ref)


@pytest.mark.parametrize("build, match", [
    (lambda g, x: g.squeeze(x, axes=(1,)), "axis 1 has size 3"),
    (lambda g, x: g.squeeze(x, axes=(0, -4)), "repeated axis"),
    (lambda g, x: g.squeeze(x, axes=(4,)), "axis 4 is out of range"),
    (lambda g, x: g.unsqueeze(x, axes=(6,)), "axis 6 is out of range for rank 5"),
])
def test_squeeze_unsqueeze_errors(build, match):
    build_error(tensor((1, 3, 1, 4)), build, match)


def test_squeeze_symbolic_axis_rejected():
    build_error(tensor(("N", 3)), lambda g, x: g.squeeze(x, axes=(0,)), "axis 0 has size N")


@pytest.mark.parametrize("xshape, shape", [((3, 1), (2, 1, 4)), ((2, 3, 4), (3, 1)), ((1,), (2, 2))])
def test_expand_matches_onnx(rng, xshape, shape):
    x = rng.standard_normal(xshape).astype(np.float32)
    (y,) = run_graph([x], lambda g, v: g.expand(v, shape=shape))
    (ref,) = onnx_run("Expand", {"x": x}, constants={"shape": i64(*shape)})
    np.testing.assert_array_equal(y, ref)


def test_expand_to_symbolic_batch(rng):
    # A static 1 expanded to the batch symbol of another input (ViT class token).
    cls = rng.standard_normal((1, 1, 4)).astype(np.float32)
    x = rng.standard_normal((3, 5, 4)).astype(np.float32)
    y, z = run_graph([cls, x], lambda g, c, v: [g.expand(c, shape=("N", 1, 4)), g.expand(v, shape=("N", 1, 1))],
                     types=[tensor((1, 1, 4)), tensor(("N", 5, 4))])
    np.testing.assert_array_equal(y, np.broadcast_to(cls, (3, 1, 4)))
    np.testing.assert_array_equal(z, x)


def test_expand_error():
    build_error(tensor((2, 3)), lambda g, x: g.expand(x, shape=(4, 3, 4)), "do not broadcast")


@pytest.mark.parametrize("perm", [(2, 0, 1), (0, 1, 2), (-1, -3, 1)])
def test_transpose_matches_numpy(x234, perm):
    (y,) = run_graph([x234], lambda g, x: g.transpose(x, perm=perm))
    np.testing.assert_array_equal(y, np.transpose(x234, [p % 3 for p in perm]))


@pytest.mark.parametrize("perm, match", [((0, 0, 1), "not a permutation"), ((1, 0), "2 entries for rank 3"),
                                         ((0, 1, 3), "perm entry 3 is out of range")])
def test_transpose_errors(perm, match):
    build_error(tensor((2, 3, 4)), lambda g, x: g.transpose(x, perm=perm), match)


def test_verifier_reports_rule_and_wrong_result_type():
    m = Module()
    f = m.add_function("main", [tensor((2, 3))])
    b = f.builder()
    bad = b.insert(Operation("graph.transpose", [f.args[0]], [tensor((3, 2))], {"perm": (0, 0)}))
    f.set_return([bad.results[0]])
    with pytest.raises(VerificationError, match=r"'graph.transpose'.*not a permutation"):
        verify(m)
    bad.attributes["perm"] = (0, 1)
    with pytest.raises(VerificationError, match="result #0 has type tensor<3x2xf32>"):
        verify(m)


def test_tile_matches_onnx(x234):
    (y,) = run_graph([x234], lambda g, x: g.tile(x, repeats=(2, 1, 3)))
    (ref,) = onnx_run("Tile", {"x": x234}, constants={"repeats": i64(2, 1, 3)})
    np.testing.assert_array_equal(y, ref)
    build_error(tensor((2, 3)), lambda g, x: g.tile(x, repeats=(2,)), "1 entries for rank 2")
    (y,) = run_graph([x234[0]], lambda g, x: g.tile(x, repeats=(2, 3)), types=[tensor(("N", 4))])
    np.testing.assert_array_equal(y, np.tile(x234[0], (2, 3)))


# ---- concat / split ----------------------------------------------------------------------------

def test_concat_matches_numpy(rng):
    xs = [rng.standard_normal((2, n, 3)).astype(np.float32) for n in (1, 4, 2)]
    (y,) = run_graph(xs, lambda g, *a: g.concat(*a, axis=-2))
    np.testing.assert_array_equal(y, np.concatenate(xs, axis=1))
    (one,) = run_graph(xs[:1], lambda g, a: g.concat(a, axis=0))
    np.testing.assert_array_equal(one, xs[0])


def test_concat_symbolic_and_errors():
    m = Module()
    f = m.add_function("main", [tensor(("N", 2)), tensor(("N", 3)), tensor((4, 2), "i32")])
    g = f.builder().graph
    a, b, c = f.args
    assert g.concat(a, b, axis=1).type == tensor(("N", 5))
    assert g.concat(a, a, a, axis=0).type == tensor(("3*N", 2))
    with pytest.raises(ShapeError, match="input #1 axis 0: 2 != 4"):
        g.concat(g.reshape(c, shape=(2, 4)), g.concat(c, c, axis=1), axis=1)
    with pytest.raises(ShapeError, match="element types differ"):
        g.concat(c, g.reshape(a, shape=("N", 2)), axis=0)
    with pytest.raises(ShapeError, match="at least one input"):
        g.concat(axis=0)


def test_split_matches_numpy(x234):
    outs = run_graph([x234], lambda g, x: g.split(x, axis=-1, sizes=(1, 0, 3)))
    assert [o.shape for o in outs] == [(2, 3, 1), (2, 3, 0), (2, 3, 3)]
    for o, r in zip(outs, np.split(x234, [1, 1], axis=2)):
        np.testing.assert_array_equal(o, r)
    (whole,) = run_graph([x234], lambda g, x: [g.split(x, axis=0, sizes=(2,))])
    np.testing.assert_array_equal(whole, x234)
    assert lookup("graph.split").offsets((1, 0, 3)) == (0, 1, 1)


@pytest.mark.parametrize("sizes, match", [((1, 2), "sum to 3, but axis 2 has size 4"),
                                          ((), "sizes is empty"), ((5, -1), "negative")])
def test_split_errors(sizes, match):
    build_error(tensor((2, 3, 4)), lambda g, x: g.split(x, axis=2, sizes=sizes), match)


def test_split_verifier_counts_results():
    m = Module()
    f = m.add_function("main", [tensor((4,))])
    op = f.builder().insert(make_op("graph.split", [f.args[0]], {"axis": 0, "sizes": (1, 3)},
                                    result_types=[tensor((1,))]))
    f.set_return(op.results)
    with pytest.raises(VerificationError, match="expected"):
        verify(m)


# ---- slice -------------------------------------------------------------------------------------

SLICE_CASES = [
    # starts, ends, axes, steps
    ((0, 1), (2, 3), (0, 1), (1, 1)),
    ((1,), (INT64_MAX,), (2,), (1,)),                     # to the end
    ((-3,), (-1,), (-1,), (1,)),                          # negative start and end
    ((-100,), (100,), (1,), (2,)),                        # clamped both ways
    ((INT64_MAX,), (INT64_MIN,), (2,), (-1,)),            # whole axis reversed
    ((-1, 2), (INT64_MIN, 0), (1, 2), (-2, -1)),          # negative steps
    ((5,), (1,), (2,), (-3,)),                            # start clamped to d-1
    ((2,), (1,), (0,), (1,)),                             # empty
    ((0,), (-1,), (0,), (-1,)),                           # empty with a negative step
    ((0, 0, 0), (1, 2, 4), (), ()),                       # default axes and steps
]


@pytest.mark.parametrize("starts, ends, axes, steps", SLICE_CASES)
def test_slice_matches_onnx(starts, ends, axes, steps, x234):
    attrs = dict(starts=starts, ends=ends, axes=axes, steps=steps)
    (y,) = run_graph([x234], lambda g, x: g.slice(x, **attrs))
    consts = {"starts": i64(*starts), "ends": i64(*ends),
              "axes": i64(*axes) if axes else None, "steps": i64(*steps) if steps else None}
    if axes and not steps:
        consts["steps"] = i64(*([1] * len(starts)))
    (ref,) = onnx_run("Slice", {"x": x234}, constants=consts)
    assert y.shape == ref.shape
    np.testing.assert_array_equal(y, ref)


def test_slice_plan_for_lowering():
    m = Module()
    f = m.add_function("main", [tensor((5, 6, 7))])
    y = f.builder().graph.slice(f.args[0], starts=(INT64_MAX, 1), ends=(INT64_MIN, -1), axes=(0, 2), steps=(-2, 3))
    plan = lookup("graph.slice").plan(y.op)
    assert [tuple(p) for p in plan] == [(4, -2, 3), (0, 1, 6), (1, 3, 2)]
    assert y.type == tensor((3, 6, 2))


def test_slice_symbolic_and_errors():
    m = Module()
    f = m.add_function("main", [tensor(("N", 6))])
    g = f.builder().graph
    x = f.args[0]
    assert g.slice(x, starts=(0, 1), ends=(INT64_MAX, 3), axes=(0, 1), steps=(1, 1)).type == tensor(("N", 2))
    for kw, want in [(dict(starts=(1,), ends=(INT64_MAX,), axes=(0,), steps=(1,)), "N-1"),
                     (dict(starts=(-3,), ends=(INT64_MAX,), axes=(0,), steps=()), 3),
                     (dict(starts=(0,), ends=(512,), axes=(0,), steps=()), "min(512,N)"),
                     (dict(starts=(1,), ends=(-1,), axes=(0,), steps=(2,)), "(N-1)//2"),
                     (dict(starts=(-1,), ends=(-INT64_MAX,), axes=(0,), steps=(-1,)), "N")]:
        assert g.slice(x, **kw).type == tensor((want, 6)), kw
    for kw, match in [(dict(starts=(0,), ends=(2,), axes=(1,), steps=(0,)), "step of axis 1 is 0"),
                      (dict(starts=(0, 0), ends=(2, 2), axes=(1, -1), steps=()), "names an axis twice"),
                      (dict(starts=(0,), ends=(2, 3), axes=(), steps=()), "must be equal")]:
        with pytest.raises(ShapeError, match=match):
            g.slice(x, **kw)


# ---- pad ----------------------------------------------------------------------------------------

PAD_CASES = [
    ("constant", (1, 0, 2, 0, 3, 1), 0.0),
    ("constant", (0, 1, 1, 2, 0, 0), -2.5),
    ("constant", (-1, 0, -2, 0, 1, 1), 1.0),     # negative pads crop
    ("reflect", (1, 2, 3, 0, 0, 3)),
    ("reflect", (0, -1, 2, 0, 1, 0)),            # crop then reflect the cropped window
    ("edge", (2, 0, 3, 1, 5, 0)),
    ("edge", (0, -2, 1, 0, 0, 2)),
]


@pytest.mark.parametrize("case", PAD_CASES)
def test_pad_matches_onnx(case, rng):
    mode, pads = case[0], case[1]
    value = case[2] if len(case) > 2 else 0.0
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    (y,) = run_graph([x], lambda g, v: g.pad(v, pads=pads, mode=mode, value=value))
    (ref,) = onnx_run("Pad", {"x": x}, {"mode": mode},
                      constants={"pads": i64(*pads), "value": np.asarray(value, np.float32)})
    np.testing.assert_array_equal(y, ref)


def test_pad_integer_and_source_map(rng):
    x = rng.integers(-9, 9, (3, 4)).astype(np.int64)
    (y,) = run_graph([x], lambda g, v: g.pad(v, pads=(1, 2, 0, 1), value=7))
    np.testing.assert_array_equal(y, np.pad(x, ((1, 0), (2, 1)), constant_values=7))
    pad = lookup("graph.pad")
    m = Module()
    f = m.add_function("main", [tensor((5,))])
    p = f.builder().graph.pad(f.args[0], pads=(-1, 3), mode="reflect")
    (axis,) = pad.plan(p.op)
    assert tuple(axis) == (1, 4, 0, 7)
    from tensorforge.dialects.graph.shape import pad_source
    src, inside = pad_source(axis, np.arange(7), "reflect")
    assert src.tolist() == [1, 2, 3, 4, 3, 2, 1] and inside.all()


@pytest.mark.parametrize("kw, match", [
    (dict(pads=(0, 4, 0, 0), mode="reflect"), "reflect pads 4, 0 on axis 1 must be < the"),
    (dict(pads=(0, 1)), "pads has 2 values; rank 2 needs 4"),
    (dict(pads=(0, 0, 0, 0), mode="wrap"), "mode = 'wrap' is not one of"),
    (dict(pads=(-2, 0, -2, 0)), "crop 4 elements from size 3"),
])
def test_pad_errors(kw, match):
    build_error(tensor((3, 4)), lambda g, x: g.pad(x, **kw), match)

def test_pad_symbolic_axis(rng):
    x = rng.standard_normal((5, 4)).astype(np.float32)
    for pads in [(1, 0, 2, 0), (-1, 1, 1, 0)]:
        (y,) = run_graph([x], lambda g, v: g.pad(v, pads=pads), types=[tensor(("N", 4))])
        (ref,) = run_graph([x], lambda g, v: g.pad(v, pads=pads))
        np.testing.assert_array_equal(y, ref)
    m = Module()
    f = m.add_function("main", [tensor(("N", 4))])
    assert f.builder().graph.pad(f.args[0], pads=(-1, 1, 3, 0)).type == tensor(("N+2", 5))


def test_fusion_kinds_and_fold():
    from tensorforge.ir import FusionKind
    kinds = {n: lookup(f"graph.{n}").fusion for n in
             ("reshape", "transpose", "flatten", "squeeze", "unsqueeze", "expand", "concat", "split",
              "slice", "pad", "tile")}
    assert {n for n, k in kinds.items() if k is FusionKind.BROADCAST} == {"squeeze", "unsqueeze", "expand"}
    assert all(k is FusionKind.INJECTIVE for n, k in kinds.items() if n not in ("squeeze", "unsqueeze", "expand"))
    # Folding a constant works for static results and is declined for symbolic ones.
    m = Module()
    f = m.add_function("main", [tensor(("N", 2))])
    g = f.builder().graph
    c = g.constant(np.arange(4, dtype=np.float32).reshape(1, 4))
    static, symbolic = g.reshape(c, shape=(2, 2)), g.expand(c, shape=("N", 4))
    np.testing.assert_array_equal(static.op.opdef.fold(static.op, [c.op.attributes["value"].array])[0],
                                  np.arange(4).reshape(2, 2))
    assert symbolic.op.opdef.fold(symbolic.op, [c.op.attributes["value"].array]) is None
    with pytest.raises(IRError):
        g.reshape(c, shape=(2, 2), bogus=1)
