"""ONNX importer: handler families against onnxruntime, opset-dependent semantics, errors.

Each numeric test builds a small model with ``onnx.helper``, imports it, runs the graph in the
reference interpreter and compares every output with onnxruntime on the same model
(rtol 1e-5 / atol 1e-6 unless a test says otherwise).
"""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from tensorforge.errors import FrontendError, TensorforgeError, UnsupportedOpError  # noqa: E402
from tensorforge.frontends.onnx import NonConstantInputError, import_onnx  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.ir.verifier import verify  # noqa: E402

_NP = {T.FLOAT: np.float32, T.INT64: np.int64, T.INT32: np.int32, T.BOOL: np.bool_, T.UINT8: np.uint8,
       T.INT8: np.int8, T.DOUBLE: np.float64, T.FLOAT16: np.float16}


def model(nodes, inputs, outputs, opset=18, inits=()):
    """inputs/outputs: (name, elem_type, shape); inits: (name, array)."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(a, n) for n, a in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run(m, feeds):
    module = import_onnx(m)
    verify(module)
    names = [i.name for i in m.graph.input if i.name not in {t.name for t in m.graph.initializer}]
    return module, run_function(module.main, [feeds[n] for n in names])


def check(m, feeds, rtol=1e-5, atol=1e-6):
    """Our outputs equal onnxruntime's, dtype and shape included."""
    _, ours = run(m, feeds)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    refs = sess.run(None, feeds)
    assert len(ours) == len(refs)
    for o, r in zip(ours, refs):
        assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, o.shape, r.dtype, r.shape)
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol)
    return ours


def unary_model(op, shape=(2, 3, 4), opset=18, **attrs):
    return model([helper.make_node(op, ["x"], ["y"], **attrs)], [("x", T.FLOAT, shape)],
                 [("y", T.FLOAT, None)], opset)


@pytest.fixture
def x234(rng):
    return rng.standard_normal((2, 3, 4)).astype(np.float32)


# ---- elementwise ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op,attrs", [
    ("Softsign", {}), ("HardSwish", {}), ("Mish", {}), ("Celu", {"alpha": 0.7}), ("Selu", {}),
    ("Shrink", {"lambd": 0.4, "bias": 0.1}), ("ThresholdedRelu", {"alpha": 0.3}), ("Sinh", {}), ("Cosh", {}),
    ("Asinh", {}), ("Tan", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}), ("LeakyRelu", {"alpha": 0.2}),
    ("Elu", {"alpha": 0.5}), ("Softplus", {}), ("Erf", {}), ("Sign", {}), ("Round", {}),
])
def test_activation_decompositions(op, attrs, x234):
    check(unary_model(op, **attrs), {"x": x234})


def test_atanh_acosh(rng):
    x = rng.uniform(-0.9, 0.9, (3, 4)).astype(np.float32)
    check(unary_model("Atanh", (3, 4)), {"x": x})
    check(unary_model("Acosh", (3, 4)), {"x": (np.abs(x) + 1.1).astype(np.float32)})


def test_prelu_broadcast_slope(rng):
    m = model([helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", T.FLOAT, (2, 3, 4))], [("y", T.FLOAT, None)],
              inits=[("s", rng.standard_normal((3, 1)).astype(np.float32))])
    check(m, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


def test_variadic_sum_mean_max(rng):
    xs = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("a", (3, 1)), ("b", (1, 4)), ("c", (3, 4)))}
    nodes = [helper.make_node(op, ["a", "b", "c"], [op]) for op in ("Sum", "Mean", "Max", "Min")]
    check(model(nodes, [(n, T.FLOAT, v.shape) for n, v in xs.items()],
                [(op, T.FLOAT, None) for op in ("Sum", "Mean", "Max", "Min")]), xs)


def test_pow_with_int_exponent_casts(rng):
    m = model([helper.make_node("Pow", ["x", "e"], ["y"])], [("x", T.FLOAT, (5,)), ("e", T.INT64, (5,))],
              [("y", T.FLOAT, None)])
    check(m, {"x": rng.uniform(0.5, 2, 5).astype(np.float32), "e": np.arange(5, dtype=np.int64)})


@pytest.mark.parametrize("opset", [7, 11, 13])
def test_clip_attribute_vs_inputs(opset, x234):
    if opset < 11:
        m = unary_model("Clip", opset=opset, min=-0.5, max=0.5)
    else:
        m = model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [("x", T.FLOAT, (2, 3, 4))],
                  [("y", T.FLOAT, None)], opset,
                  inits=[("lo", np.array(-0.5, np.float32)), ("hi", np.array(0.5, np.float32))])
    check(m, {"x": x234})


def test_clip_int_with_runtime_bounds():
    m = model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
              [("x", T.INT8, (6,)), ("lo", T.INT8, ()), ("hi", T.INT8, ())], [("y", T.INT8, None)], 13)
    check(m, {"x": np.array([-100, -3, 0, 3, 100, 127], np.int8), "lo": np.array(-5, np.int8),
              "hi": np.array(50, np.int8)})


def test_cast_and_comparisons(x234):
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=T.INT32), helper.make_node("Greater", ["x", "z"], ["g"]),
             helper.make_node("Where", ["g", "x", "z"], ["w"]), helper.make_node("IsNaN", ["x"], ["n"])]
    m = model(nodes, [("x", T.FLOAT, (2, 3, 4))], [("i", T.INT32, None), ("g", T.BOOL, None), ("w", T.FLOAT, None),
                                                    ("n", T.BOOL, None)], inits=[("z", np.zeros((), np.float32))])
    check(m, {"x": (x234 * 5).astype(np.float32)})


def test_integer_div_truncates_and_mod_sign():
    a = np.array([-7, -6, 5, 7], np.int32)
    b = np.array([2, -4, -3, 3], np.int32)
    nodes = [helper.make_node("Div", ["a", "b"], ["d"]), helper.make_node("Mod", ["a", "b"], ["m"]),
             helper.make_node("Mod", ["a", "b"], ["f"], fmod=1)]
    m = model(nodes, [("a", T.INT32, (4,)), ("b", T.INT32, (4,))], [(n, T.INT32, None) for n in "dmf"])
    check(m, {"a": a, "b": b})


# ---- shape ops: attributes that became inputs ---------------------------------------------------
def test_reshape_zero_and_minus_one(rng):
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", T.FLOAT, (2, 3, 4))], [("y", T.FLOAT, None)],
              inits=[("s", np.array([0, -1, 2], np.int64))])
    module, _ = run(m, {"x": np.zeros((2, 3, 4), np.float32)})
    assert module.main.outputs[0].type.shape == (2, 6, 2)
    check(m, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_attr_then_input(opset, rng):
    if opset < 13:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["u"], axes=[0, -1]),
                 helper.make_node("Squeeze", ["u"], ["y"], axes=[0])]
        inits = []
    else:
        nodes = [helper.make_node("Unsqueeze", ["x", "ua"], ["u"]), helper.make_node("Squeeze", ["u", "sa"], ["y"])]
        inits = [("ua", np.array([0, -1], np.int64)), ("sa", np.array([0], np.int64))]
    m = model(nodes, [("x", T.FLOAT, (2, 3))], [("y", T.FLOAT, None)], opset, inits)
    (y,) = check(m, {"x": rng.standard_normal((2, 3)).astype(np.float32)})
    assert y.shape == (2, 3, 1)


@pytest.mark.parametrize("opset,kw,extra", [
    (11, {"split": [1, 3]}, []), (13, {}, [("sp", np.array([1, 3], np.int64))]), (18, {"num_outputs": 2}, [])])
def test_split_per_opset(opset, kw, extra, rng):
    inputs = ["x"] + [n for n, _ in extra]
    m = model([helper.make_node("Split", inputs, ["a", "b"], axis=1, **kw)], [("x", T.FLOAT, (2, 4))],
              [("a", T.FLOAT, None), ("b", T.FLOAT, None)], opset, extra)
    check(m, {"x": rng.standard_normal((2, 4)).astype(np.float32)})


def test_slice_negative_steps_and_clamping(rng):
    inits = [("st", np.array([-1, 0], np.int64)), ("en", np.array([-1000, 2 ** 62], np.int64)),
             ("ax", np.array([0, 2], np.int64)), ("sp", np.array([-2, 3], np.int64))]
    m = model([helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [("x", T.FLOAT, (5, 3, 7))],
              [("y", T.FLOAT, None)], 13, inits)
    check(m, {"x": rng.standard_normal((5, 3, 7)).astype(np.float32)})


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes_and_axes(mode, rng):
    inits = [("p", np.array([1, 2, 2, 0], np.int64)), ("v", np.array(1.5, np.float32)), ("a", np.array([0, 2], np.int64))]
    m = model([helper.make_node("Pad", ["x", "p", "v", "a"], ["y"], mode=mode)], [("x", T.FLOAT, (3, 2, 4))],
              [("y", T.FLOAT, None)], 18, inits)
    check(m, {"x": rng.standard_normal((3, 2, 4)).astype(np.float32)})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_roundtrip(mode, rng):
    nodes = [helper.make_node("DepthToSpace", ["x"], ["d"], blocksize=2, mode=mode),
             helper.make_node("SpaceToDepth", ["d"], ["y"], blocksize=2)]
    m = model(nodes, [("x", T.FLOAT, (1, 8, 2, 3))], [("d", T.FLOAT, None), ("y", T.FLOAT, None)], 13)
    check(m, {"x": rng.standard_normal((1, 8, 2, 3)).astype(np.float32)})


def test_shape_arithmetic_folds_into_reshape(rng):
    """Shape -> Gather -> Concat -> Reshape of static shapes folds: no shape ops survive."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "m1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["y"])]
    inits = [("i0", np.array([0], np.int64)), ("m1", np.array([-1], np.int64))]
    m = model(nodes, [("x", T.FLOAT, (2, 3, 4))], [("y", T.FLOAT, None)], 13, inits)
    module, _ = run(m, {"x": np.zeros((2, 3, 4), np.float32)})
    names = [op.name for op in module.main.body]
    assert names == ["graph.reshape", "func.return"]
    check(m, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


# ---- reductions and softmax ---------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL1", "ReduceL2", "ReduceLogSumExp",
                                "ReduceSumSquare", "ReduceProd", "ReduceLogSum"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_axes_attr_or_input(op, opset, rng):
    as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    inputs, inits, kw = ["x"], [], {}
    if as_input:
        inputs.append("a")
        inits = [("a", np.array([-1, 0], np.int64))]
    else:
        kw["axes"] = [-1, 0]
    m = model([helper.make_node(op, inputs, ["y"], keepdims=0, **kw)], [("x", T.FLOAT, (2, 3, 4))],
              [("y", T.FLOAT, None)], opset, inits)
    check(m, {"x": rng.uniform(0.1, 2, (2, 3, 4)).astype(np.float32)}, rtol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_flattening_before_opset13(op, opset, x234):
    """axis=1 on a 3-D input: opset 11 normalises over axes 1 and 2 together, opset 13 over axis 1."""
    check(unary_model(op, opset=opset, axis=1), {"x": x234})


def test_argmax_topk_cumsum(rng):
    nodes = [helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
             helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1, largest=0),
             helper.make_node("CumSum", ["x", "ax"], ["cs"], exclusive=1, reverse=1)]
    inits = [("k", np.array([2], np.int64)), ("ax", np.array(2, np.int64))]
    m = model(nodes, [("x", T.FLOAT, (2, 3, 4))],
              [("am", T.INT64, None), ("tv", T.FLOAT, None), ("ti", T.INT64, None), ("cs", T.FLOAT, None)], 13, inits)
    check(m, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32)})


# ---- nn -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("auto_pad", ["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"])
def test_conv_and_pools_auto_pad(auto_pad, rng):
    kw = {"pads": [1, 0, 2, 1]} if auto_pad == "NOTSET" else {}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 1], auto_pad=auto_pad, **kw),
             helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 2], strides=[2, 2], auto_pad=auto_pad, **kw),
             helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[3, 3], auto_pad=auto_pad, **kw)]
    inits = [("w", rng.standard_normal((4, 3, 3, 2)).astype(np.float32)), ("b", rng.standard_normal(4).astype(np.float32))]
    m = model(nodes, [("x", T.FLOAT, (1, 3, 7, 6))], [(n, T.FLOAT, None) for n in ("c", "mp", "ap")], 18, inits)
    check(m, {"x": rng.standard_normal((1, 3, 7, 6)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kw", [{"output_shape": [9, 8]}, {"auto_pad": "SAME_UPPER"}, {"pads": [1, 0, 0, 1],
                                                                                    "output_padding": [1, 0]}])
def test_conv_transpose_padding_forms(kw, rng):
    inits = [("w", rng.standard_normal((3, 2, 3, 3)).astype(np.float32))]
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], **kw)], [("x", T.FLOAT, (1, 3, 4, 4))],
              [("y", T.FLOAT, None)], 18, inits)
    check(m, {"x": rng.standard_normal((1, 3, 4, 4)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_dilated_average_pool_and_lp_pool(rng):
    nodes = [helper.make_node("AveragePool", ["x"], ["a"], kernel_shape=[2, 2], dilations=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("LpPool", ["x"], ["l"], kernel_shape=[3, 3], p=2, strides=[2, 2])]
    m = model(nodes, [("x", T.FLOAT, (1, 2, 6, 6))], [("a", T.FLOAT, None), ("l", T.FLOAT, None)], 19)
    check(m, {"x": rng.standard_normal((1, 2, 6, 6)).astype(np.float32)}, rtol=1e-5)


def test_norms(rng):
    c = 4
    inits = [("s", rng.uniform(0.5, 1.5, c).astype(np.float32)), ("b", rng.standard_normal(c).astype(np.float32)),
             ("m", rng.standard_normal(c).astype(np.float32)), ("v", rng.uniform(0.5, 1.5, c).astype(np.float32)),
             ("ls", rng.standard_normal(5).astype(np.float32))]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-3),
             helper.make_node("InstanceNormalization", ["x", "s", "b"], ["in"]),
             helper.make_node("LayerNormalization", ["x", "ls"], ["ln", "mean", "istd"], axis=-1),
             helper.make_node("LRN", ["x"], ["lrn"], size=3),
             helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"]),
             helper.make_node("LpNormalization", ["x"], ["lpn"], axis=1, p=1)]
    outs = ["bn", "in", "ln", "mean", "istd", "lrn", "mvn", "lpn"]
    m = model(nodes, [("x", T.FLOAT, (2, c, 3, 5))], [(n, T.FLOAT, None) for n in outs], 17, inits)
    check(m, {"x": rng.standard_normal((2, c, 3, 5)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_batchnorm_training_mode_outputs(rng):
    c = 3
    inits = [("s", np.ones(c, np.float32)), ("b", np.zeros(c, np.float32)), ("m", np.zeros(c, np.float32)),
             ("v", np.ones(c, np.float32))]
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1)],
              [("x", T.FLOAT, (4, c, 2))], [(n, T.FLOAT, None) for n in ("y", "rm", "rv")], 15, inits)
    x = rng.standard_normal((4, c, 2)).astype(np.float32)
    _, (y, rm, rv) = run(m, {"x": x})
    mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    np.testing.assert_allclose(rm, 0.1 * mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rv, 0.9 + 0.1 * var, rtol=1e-5)
    np.testing.assert_allclose(y, (x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5), rtol=1e-4, atol=1e-5)


# ---- linalg, indexing -----------------------------------------------------------------------------
@pytest.mark.parametrize("kw,cshape", [({}, None), ({"transA": 1, "alpha": 0.5}, (5,)),
                                       ({"transB": 1, "beta": 2.0}, (1, 5))])
def test_gemm_variants(kw, cshape, rng):
    a = rng.standard_normal((4, 3) if kw.get("transA") else (3, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4) if kw.get("transB") else (4, 5)).astype(np.float32)
    inits = [("b", b)] + ([("c", rng.standard_normal(cshape).astype(np.float32))] if cshape else [])
    m = model([helper.make_node("Gemm", ["a", "b"] + (["c"] if cshape else []), ["y"], **kw)],
              [("a", T.FLOAT, a.shape)], [("y", T.FLOAT, None)], 13, inits)
    check(m, {"a": a}, rtol=1e-5)


@pytest.mark.parametrize("eq,shapes", [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ij->ji", [(3, 4)]),
                                       ("...ii->...i", [(2, 3, 3)]), ("i,i", [(5,), (5,)]),
                                       ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)])])
def test_einsum(eq, shapes, rng):
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([helper.make_node("Einsum", names, ["y"], equation=eq)], [(n, T.FLOAT, s) for n, s in zip(names, shapes)],
              [("y", T.FLOAT, None)], 12)
    check(m, {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}, rtol=1e-5)


def test_gather_family_and_one_hot(rng):
    nodes = [helper.make_node("Gather", ["x", "gi"], ["g"], axis=1),
             helper.make_node("GatherElements", ["x", "ei"], ["ge"], axis=2),
             helper.make_node("GatherND", ["x", "ni"], ["gn"], batch_dims=1),
             helper.make_node("OneHot", ["oi", "depth", "vals"], ["oh"], axis=0)]
    inits = [("gi", np.array([[2, -1], [0, 1]], np.int64)), ("ei", rng.integers(-4, 4, (2, 3, 2)).astype(np.int64)),
             ("ni", np.array([[[1, 2]], [[0, -1]]], np.int64)), ("depth", np.array(4, np.int64)),
             ("vals", np.array([-1.0, 3.0], np.float32))]
    m = model(nodes, [("x", T.FLOAT, (2, 3, 4)), ("oi", T.INT64, (3,))],
              [(n, T.FLOAT, None) for n in ("g", "ge", "gn", "oh")], 13, inits)
    check(m, {"x": rng.standard_normal((2, 3, 4)).astype(np.float32), "oi": np.array([0, -1, 7], np.int64)})


@pytest.mark.parametrize("mode,coord", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                        ("cubic", "align_corners"), ("linear", "pytorch_half_pixel")])
def test_resize_sizes_and_scales(mode, coord, rng):
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["a"], mode=mode, coordinate_transformation_mode=coord),
             helper.make_node("Resize", ["x", "", "", "sz"], ["b"], mode=mode, coordinate_transformation_mode=coord)]
    inits = [("sc", np.array([1, 1, 2, 3], np.float32)), ("sz", np.array([1, 2, 3, 7], np.int64))]
    m = model(nodes, [("x", T.FLOAT, (1, 2, 4, 5))], [("a", T.FLOAT, None), ("b", T.FLOAT, None)], 18, inits)
    check(m, {"x": rng.standard_normal((1, 2, 4, 5)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_trilu_range_constant_of_shape(rng):
    nodes = [helper.make_node("Trilu", ["x", "k"], ["t"], upper=0),
             helper.make_node("Range", ["s", "l", "d"], ["r"]),
             helper.make_node("ConstantOfShape", ["shp"], ["c"], value=numpy_helper.from_array(np.array([7], np.int32)))]
    inits = [("k", np.array(1, np.int64)), ("s", np.array(10, np.int64)), ("l", np.array(1, np.int64)),
             ("d", np.array(-3, np.int64)), ("shp", np.array([2, 3], np.int64))]
    m = model(nodes, [("x", T.FLOAT, (2, 4, 5))], [("t", T.FLOAT, None), ("r", T.INT64, None), ("c", T.INT32, None)],
              18, inits)
    check(m, {"x": rng.standard_normal((2, 4, 5)).astype(np.float32)})


# ---- attention, losses, quantization -------------------------------------------------------------
@pytest.mark.parametrize("kw,shapes,mask", [
    ({}, [(1, 2, 3, 4)] * 3, None),
    ({"is_causal": 1}, [(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 4)], None),
    ({"q_num_heads": 4, "kv_num_heads": 2}, [(2, 3, 16), (2, 5, 8), (2, 5, 8)], "bool"),
    ({"softcap": 2.0, "scale": 0.3}, [(1, 2, 3, 4)] * 3, "float"),
])
def test_attention_variants(kw, shapes, mask, rng):
    names = ["q", "k", "v"]
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes)}
    inputs = [(n, T.FLOAT, s) for n, s in zip(names, shapes)]
    q_len, kv_len = shapes[0][-2], shapes[1][-2]
    if mask == "bool":
        feeds["mask"] = rng.random((q_len, kv_len)) > 0.3
        inputs.append(("mask", T.BOOL, (q_len, kv_len)))
    elif mask == "float":
        feeds["mask"] = rng.standard_normal((q_len, kv_len)).astype(np.float32)
        inputs.append(("mask", T.FLOAT, (q_len, kv_len)))
    m = model([helper.make_node("Attention", [i[0] for i in inputs], ["y"], **kw)], inputs, [("y", T.FLOAT, None)], 23)
    check(m, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_with_weights_and_ignore(reduction, rng):
    inits = [("w", rng.uniform(0.5, 2, 5).astype(np.float32))]
    m = model([helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["loss", "logp"], reduction=reduction,
                                ignore_index=2)],
              [("x", T.FLOAT, (3, 5, 2)), ("t", T.INT64, (3, 2))], [("loss", T.FLOAT, None), ("logp", T.FLOAT, None)],
              13, inits)
    check(m, {"x": rng.standard_normal((3, 5, 2)).astype(np.float32), "t": np.array([[0, 2], [4, 1], [2, 3]], np.int64)},
          rtol=1e-5)


def test_quantize_dequantize_per_axis(rng):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=1)]
    inits = [("s", np.array([0.02, 0.05, 0.1], np.float32)), ("z", np.array([0, 10, -5], np.int8))]
    m = model(nodes, [("x", T.FLOAT, (2, 3, 4))], [("q", T.INT8, None), ("d", T.FLOAT, None)], 13, inits)
    check(m, {"x": (rng.standard_normal((2, 3, 4)) * 3).astype(np.float32)})


# ---- graph structure -----------------------------------------------------------------------------
def test_symbolic_batch_dimension(rng):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", T.FLOAT, ("N", 3))], [("y", T.FLOAT, ("N", 3))])
    module = import_onnx(m)
    assert module.main.args[0].type.shape == ("N", 3)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(run_function(module.main, [x])[0], np.maximum(x, 0))


def test_dynamic_batch_shape_arithmetic_gives_symbolic_reshape(rng):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape on a dim_param batch: reshape to ("N", 12)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]), helper.make_node("Concat", ["n1", "m1"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    inits = [("i0", np.array(0, np.int64)), ("ax", np.array([0], np.int64)), ("m1", np.array([-1], np.int64))]
    m = model(nodes, [("x", T.FLOAT, ("N", 3, 4))], [("y", T.FLOAT, None)], 13, inits)
    module = import_onnx(m)
    assert module.main.outputs[0].type.shape == ("N", 12)
    assert [op.name for op in module.main.body] == ["graph.reshape", "func.return"]
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run_function(module.main, [x])[0], x.reshape(5, 12))


def test_initializer_listed_as_input_is_constant(rng):
    w = rng.standard_normal((3, 2)).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", T.FLOAT, (4, 3)), ("w", T.FLOAT, (3, 2))],
              [("y", T.FLOAT, None)], inits=[("w", w)])
    module = import_onnx(m)
    assert len(module.main.args) == 1
    ops = [op.name for op in module.main.body]
    assert ops.count("graph.constant") == 1
    check(m, {"x": rng.standard_normal((4, 3)).astype(np.float32)})


def test_shape_input_from_model_input_needs_binding(rng):
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"])], [("x", T.FLOAT, (2, 6)), ("s", T.INT64, (2,))],
              [("y", T.FLOAT, None)], 13)
    with pytest.raises(NonConstantInputError) as info:
        import_onnx(m)
    assert info.value.inputs == ("s",) and "Reshape" in str(info.value)
    module = import_onnx(m, bind_inputs={"s": np.array([3, -1], np.int64)})
    assert [a.name_hint for a in module.main.args] == ["x"]
    assert module.main.outputs[0].type.shape == (3, 4)


def test_accepts_path_and_bytes(tmp_path, rng):
    m = unary_model("Relu", (2, 2))
    path = tmp_path / "relu.onnx"
    onnx.save(m, str(path))
    for source in (str(path), path, m.SerializeToString()):
        module = import_onnx(source)
        x = rng.standard_normal((2, 2)).astype(np.float32)
        np.testing.assert_array_equal(run_function(module.main, [x])[0], np.maximum(x, 0))


# ---- errors --------------------------------------------------------------------------------------
def test_unsupported_op_names_node_op_and_opset():
    m = model([helper.make_node("MaxRoiPool", ["x", "r"], ["y"], name="my_pool", pooled_shape=[2, 2])],
              [("x", T.FLOAT, (1, 1, 4, 4)), ("r", T.FLOAT, (1, 5))], [("y", T.FLOAT, None)], 22)
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(m)
    msg = str(info.value)
    assert "my_pool" in msg and "MaxRoiPool" in msg and "opset 22" in msg


def test_random_op_rejected_with_the_reason():
    """Ops rejected on purpose say why (NonZero, once rejected as data-dependent, is supported)."""
    m = model([helper.make_node("RandomUniformLike", ["x"], ["y"], name="rnd")], [("x", T.FLOAT, (3,))],
              [("y", T.FLOAT, None)], 13)
    with pytest.raises(UnsupportedOpError, match="rnd.*RandomUniformLike.*rejected: it is random"):
        import_onnx(m)


def test_unknown_attribute_is_reported():
    m = unary_model("Relu", (2,), bogus=3)
    with pytest.raises(UnsupportedOpError, match="bogus"):
        import_onnx(m)


def test_unsupported_attribute_value_is_reported():
    m = model([helper.make_node("Pad", ["x", "p"], ["y"], mode="spiral")], [("x", T.FLOAT, (3,))], [("y", T.FLOAT, None)],
              19, [("p", np.array([1, 1], np.int64))])
    with pytest.raises(UnsupportedOpError, match="Pad.*opset 19.*spiral"):
        import_onnx(m)


def test_other_domains_and_unsupported_types():
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="com.microsoft")], [("x", T.FLOAT, (2,))],
              [("y", T.FLOAT, None)])
    m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOpError, match="com.microsoft"):
        import_onnx(m)
    m = model([helper.make_node("Identity", ["x"], ["y"])], [("x", T.STRING, (2,))], [("y", T.STRING, None)])
    with pytest.raises(UnsupportedOpError, match="STRING"):
        import_onnx(m)


def test_bad_files_give_tensorforge_errors(tmp_path):
    with pytest.raises(FrontendError, match="no such file"):
        import_onnx(str(tmp_path / "missing.onnx"))
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe\x00\x01" * 10)
    with pytest.raises(TensorforgeError):
        import_onnx(str(junk))
    text = tmp_path / "empty.onnx"
    text.write_bytes(b"")
    with pytest.raises(FrontendError, match="no ONNX graph"):
        import_onnx(str(text))
    with pytest.raises(FrontendError):
        import_onnx(12345)


@pytest.mark.parametrize("op,kw", [("LSTM", {"direction": "bidirectional"}), ("GRU", {"linear_before_reset": 1}),
                                   ("GRU", {"direction": "reverse"}), ("RNN", {"activations": ["Relu"]})])
def test_recurrent_layers_unrolled(op, kw, rng):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    dirs = 2 if kw.get("direction") == "bidirectional" else 1
    hidden, inp, steps, batch = 5, 3, 4, 2
    inits = [("W", (rng.standard_normal((dirs, gates * hidden, inp)) * 0.5).astype(np.float32)),
             ("R", (rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5).astype(np.float32)),
             ("B", (rng.standard_normal((dirs, 2 * gates * hidden)) * 0.1).astype(np.float32))]
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    m = model([helper.make_node(op, ["X", "W", "R", "B"], outs, hidden_size=hidden, **kw)],
              [("X", T.FLOAT, (steps, batch, inp))], [(n, T.FLOAT, None) for n in outs], 14, inits)
    check(m, {"X": rng.standard_normal((steps, batch, inp)).astype(np.float32)}, rtol=1e-4, atol=1e-5)


def test_undefined_value_is_a_frontend_error():
    m = model([helper.make_node("Relu", ["nope"], ["y"], name="r")], [("x", T.FLOAT, (2,))], [("y", T.FLOAT, None)])
    with pytest.raises(FrontendError, match="'r'.*'nope'"):
        import_onnx(m)


def test_tensorforge_compile_dispatches_onnx_models(rng):
    import tensorforge
    w = rng.standard_normal((3, 2)).astype(np.float32)
    m = model([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
              [("x", T.FLOAT, (4, 3))], [("y", T.FLOAT, None)], inits=[("w", w)])
    x = rng.standard_normal((4, 3)).astype(np.float32)
    out = tensorforge.compile(m, target="interpreter")(x)
    np.testing.assert_allclose(out, np.maximum(x @ w, 0), rtol=1e-6)
