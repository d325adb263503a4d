"""Element types through the ONNX frontend on both targets: unsigned 16/32/64-bit integers,
the storage-only float8/float4/int4/int2 types (casts, QuantizeLinear/DequantizeLinear),
BitCast, the bitwise ops and Asin/Acos/Atan, checked against the ONNX reference evaluator.

Each test builds one model with many outputs, so one native compile covers many cases.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorforge
from tensorforge.ir import lowbits
from tensorforge.ir.types import DType

ml_dtypes = pytest.importorskip("ml_dtypes")

TARGETS = ["interpreter", "cpu"]
FLOAT8 = {DType.f8e4m3fn: TensorProto.FLOAT8E4M3FN, DType.f8e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ,
          DType.f8e5m2: TensorProto.FLOAT8E5M2, DType.f8e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ}
SMALL_INT = {DType.i4: TensorProto.INT4, DType.u4: TensorProto.UINT4, DType.i2: TensorProto.INT2,
             DType.u2: TensorProto.UINT2}


def _model(nodes, inputs, outputs, opset=23):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_both(model, feeds: dict, target: str):
    """(tensorforge outputs, reference outputs) for ``feeds`` in the graph's input order."""
    for vi in model.graph.input:      # the inputs' shapes from the feeds
        shape = vi.type.tensor_type.shape
        shape.ClearField("dim")
        for d in np.shape(feeds[vi.name]):
            shape.dim.add().dim_value = d
    ref = ReferenceEvaluator(model).run(None, feeds)
    cm = tensorforge.compile(model, target=target)
    got = cm(*[feeds[i.name] for i in model.graph.input])
    got = list(got) if isinstance(got, (tuple, list)) else [got]
    return got, ref


def _same_bits(got, want, name=""):
    """Equal as values of the ONNX type: equal dtype, NaN where NaN, otherwise equal (signs of zero too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, name
    if got.dtype.kind in "iub" or got.dtype.name in ("int4", "uint4", "int2", "uint2"):
        np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64), err_msg=name)
        return
    g, w = got.astype(np.float32), want.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=name)
    ok = ~np.isnan(w)
    np.testing.assert_array_equal(g[ok], w[ok], err_msg=name)
    np.testing.assert_array_equal(np.signbit(g[ok]), np.signbit(w[ok]), err_msg=f"{name} (sign of zero)")


# ---- the rounding routines against ml_dtypes (what the ONNX reference uses) ----------------------
_ML = {DType.f8e4m3fn: "float8_e4m3fn", DType.f8e4m3fnuz: "float8_e4m3fnuz", DType.f8e5m2: "float8_e5m2",
       DType.f8e5m2fnuz: "float8_e5m2fnuz", DType.f4e2m1: "float4_e2m1fn"}


def _edge_floats() -> np.ndarray:
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(20000) * rng.choice([1e-4, 0.01, 1, 30, 300, 1e4, 6e4], 20000)).astype(np.float32)
    special = np.array([0, -0.0, np.inf, -np.inf, np.nan, 448, 464, 465, 480, 240, 248, 57344, 61440, 61441,
                        6, 5, 7, 0.25, 0.75, 2 ** -10, 2 ** -9, 3 * 2 ** -10, 2 ** -17, -2 ** -17, 1e-30], np.float32)
    return np.concatenate([bits, scaled, special, -special])


@pytest.mark.parametrize("dtype", list(_ML))
@pytest.mark.parametrize("saturate", [True, False])
def test_round_float_matches_ml_dtypes(dtype, saturate):
    from onnx.numpy_helper import saturate_cast
    x = _edge_floats()
    np_type = getattr(ml_dtypes, _ML[dtype])
    for src in (np.float32, np.float16, np.float64):
        with np.errstate(all="ignore"):
            xs = x.astype(src)
            want = (saturate_cast(xs, np_type) if saturate and dtype is not DType.f4e2m1 else xs.astype(np_type))
        got = lowbits.round_float(xs, dtype, saturate)
        _same_bits(got, want.astype(np.float32), f"{dtype} from {src.__name__}")
        # the printer's bit patterns: ml_dtypes' encoding of the same values, and back
        bits = lowbits.encode(got, dtype)
        _same_bits(lowbits.decode(bits, dtype), got, f"{dtype} bits")
        if dtype is not DType.f4e2m1:
            finite = np.isfinite(got)
            np.testing.assert_array_equal(bits[finite], got[finite].astype(np_type).view(np.uint8))


@pytest.mark.parametrize("dtype", list(SMALL_INT))
def test_small_int_matches_ml_dtypes(dtype):
    np_type = getattr(ml_dtypes, {"i4": "int4", "ui4": "uint4", "i2": "int2", "ui2": "uint2"}[dtype.value])
    xf = np.concatenate([np.linspace(-20, 20, 161), [np.nan, np.inf, -np.inf, 7.99, -8.99]]).astype(np.float32)
    xi = np.arange(-300, 300, dtype=np.int64)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(lowbits.to_small_int(xf, dtype), xf.astype(np_type).astype(dtype.np))
    np.testing.assert_array_equal(lowbits.to_small_int(xi, dtype), xi.astype(np_type).astype(dtype.np))


# ---- casts through the frontend on both targets ---------------------------------------------------
def _cast_model(src_code: int, pairs) -> onnx.ModelProto:
    """x (src) -> one Cast per (to, saturate); each output also cast back to FLOAT."""
    nodes, outputs = [], []
    for k, (to, sat) in enumerate(pairs):
        attrs = {"to": to} if sat is None else {"to": to, "saturate": sat}
        nodes.append(helper.make_node("Cast", ["x"], [f"y{k}"], **attrs))
        nodes.append(helper.make_node("Cast", [f"y{k}"], [f"f{k}"], to=TensorProto.FLOAT))
        outputs += [helper.make_tensor_value_info(f"y{k}", to, None),
                    helper.make_tensor_value_info(f"f{k}", TensorProto.FLOAT, None)]
    return _model(nodes, [helper.make_tensor_value_info("x", src_code, None)], outputs)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("src", [np.float32, np.float16])
def test_cast_to_float8_float4_small_ints(target, src):
    with np.errstate(all="ignore"):
        x = _edge_floats()[-400:].astype(src).reshape(8, 50)
    pairs = [(code, sat) for code in FLOAT8.values() for sat in (None, 0)] + [(TensorProto.FLOAT4E2M1, None)]
    pairs += [(code, None) for code in SMALL_INT.values()]
    model = _cast_model(helper.np_dtype_to_tensor_dtype(np.dtype(src)), pairs)
    got, ref = _run_both(model, {"x": x}, target)
    for i, (g, r) in enumerate(zip(got, ref)):
        _same_bits(g, r, f"{target}: output {model.graph.output[i].name}")


@pytest.mark.parametrize("target", TARGETS)
def test_cast_from_storage_types(target):
    """float8/int4 inputs (ml_dtypes arrays) to float, float16, int8 and to another float8 type."""
    xf = lowbits.round_float(np.linspace(-300, 300, 61).astype(np.float32), DType.f8e4m3fn)
    x8 = xf.astype(ml_dtypes.float8_e4m3fn)
    x4 = np.arange(-8, 8).astype(ml_dtypes.int4)
    nodes = [helper.make_node("Cast", ["a"], ["a32"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["a"], ["a16"], to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["a"], ["a52"], to=TensorProto.FLOAT8E5M2),
             helper.make_node("Cast", ["a"], ["anuz"], to=TensorProto.FLOAT8E4M3FNUZ, saturate=0),
             helper.make_node("Cast", ["b"], ["b8"], to=TensorProto.INT8),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["b2"], to=TensorProto.INT2),
             helper.make_node("Identity", ["b"], ["bid"])]
    outs = [("a32", TensorProto.FLOAT), ("a16", TensorProto.FLOAT16), ("a52", TensorProto.FLOAT8E5M2),
            ("anuz", TensorProto.FLOAT8E4M3FNUZ), ("b8", TensorProto.INT8), ("bf", TensorProto.FLOAT),
            ("b2", TensorProto.INT2), ("bid", TensorProto.INT4)]
    model = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT8E4M3FN, None),
                           helper.make_tensor_value_info("b", TensorProto.INT4, None)],
                   [helper.make_tensor_value_info(n, c, None) for n, c in outs])
    got, ref = _run_both(model, {"a": x8, "b": x4}, target)
    for (name, _), g, r in zip(outs, got, ref):
        _same_bits(g, r, f"{target}: {name}")


@pytest.mark.parametrize("target", TARGETS)
def test_quantize_dequantize_low_bit(target):
    x = np.linspace(-20, 20, 24, dtype=np.float32).reshape(4, 6)
    scale = np.float32(0.75)
    zps = {"i4": (TensorProto.INT4, np.array(1).astype(ml_dtypes.int4)),
           "u2": (TensorProto.UINT2, np.array(1).astype(ml_dtypes.uint2)),
           "e4": (TensorProto.FLOAT8E4M3FN, np.array(0).astype(ml_dtypes.float8_e4m3fn)),
           "e5": (TensorProto.FLOAT8E5M2, np.array(0).astype(ml_dtypes.float8_e5m2)),
           "u16": (TensorProto.UINT16, np.array(30000, dtype=np.uint16))}
    nodes, outs, inputs = [], [], [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                                   helper.make_tensor_value_info("s", TensorProto.FLOAT, [])]
    feeds = {"x": x, "s": scale}
    for k, (code, zp) in zps.items():
        inputs.append(helper.make_tensor_value_info(f"z{k}", code, []))
        feeds[f"z{k}"] = zp
        nodes += [helper.make_node("QuantizeLinear", ["x", "s", f"z{k}"], [f"q{k}"]),
                  helper.make_node("DequantizeLinear", [f"q{k}", "s", f"z{k}"], [f"d{k}"])]
        outs += [helper.make_tensor_value_info(f"q{k}", code, None),
                 helper.make_tensor_value_info(f"d{k}", TensorProto.FLOAT, None)]
    model = _model(nodes, inputs, outs, opset=21)
    got, ref = _run_both(model, feeds, target)
    for o, g, r in zip(outs, got, ref):
        _same_bits(g, r, f"{target}: {o.name}")


# ---- unsigned integers ------------------------------------------------------------------------------
_UINT = {np.uint16: TensorProto.UINT16, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("np_type", list(_UINT))
def test_unsigned_arithmetic(target, np_type):
    info = np.iinfo(np_type)
    a = np.array([0, 1, 2, 7, info.max, info.max - 1, info.max // 2 + 3, 1000], dtype=np_type)
    b = np.array([1, 3, 5, 2, 2, info.max, 7, 999], dtype=np_type)
    code = _UINT[np_type]
    ops = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
           "BitwiseAnd", "BitwiseOr", "BitwiseXor"]
    nodes = [helper.make_node(op, ["a", "b"], [op.lower()]) for op in ops]
    nodes += [helper.make_node("Mod", ["a", "b"], ["mod"]), helper.make_node("BitwiseNot", ["a"], ["not"]),
              helper.make_node("ReduceMax", ["a"], ["rmax"], keepdims=0),
              helper.make_node("ReduceMin", ["a"], ["rmin"], keepdims=0),
              helper.make_node("ReduceSum", ["a"], ["rsum"], keepdims=0),
              helper.make_node("BitShift", ["a", "s"], ["shl"], direction="LEFT"),
              helper.make_node("BitShift", ["a", "s"], ["shr"], direction="RIGHT"),
              helper.make_node("Cast", ["a"], ["af"], to=TensorProto.DOUBLE),
              helper.make_node("Cast", ["a"], ["a8"], to=TensorProto.UINT8)]
    names = [n.output[0] for n in nodes]
    outs = [helper.make_tensor_value_info(n, TensorProto.BOOL if n in ("equal", "less", "greater", "lessorequal",
                                                                        "greaterorequal") else
                                          TensorProto.DOUBLE if n == "af" else TensorProto.UINT8 if n == "a8"
                                          else code, None) for n in names]
    model = _model(nodes, [helper.make_tensor_value_info(n, code, None) for n in "abs"], outs, opset=18)
    s = np.array([0, 1, 3, 1, 5, 2, 4, 1], dtype=np_type)
    got, ref = _run_both(model, {"a": a, "b": b, "s": s}, target)
    for name, g, r in zip(names, got, ref):
        _same_bits(g, r, f"{target} {np_type.__name__}: {name}")


@pytest.mark.parametrize("target", TARGETS)
def test_unsigned_reduce_identities(target):
    """max over values that are all above the signed range, min over values all at the top."""
    a = np.array([[2 ** 63 + 5, 2 ** 64 - 2], [2 ** 63 + 1, 2 ** 63]], dtype=np.uint64)
    b = np.array([[2 ** 31 + 7, 2 ** 32 - 1], [2 ** 31, 2 ** 32 - 2]], dtype=np.uint32)
    nodes = [helper.make_node("ReduceMax", ["a"], ["amax"], axes=[1], keepdims=0),
             helper.make_node("ReduceMin", ["a"], ["amin"], axes=[1], keepdims=0),
             helper.make_node("ReduceMax", ["b"], ["bmax"], axes=[0], keepdims=0),
             helper.make_node("ReduceMin", ["b"], ["bmin"], axes=[0], keepdims=0)]
    outs = [helper.make_tensor_value_info(n, TensorProto.UINT64 if n[0] == "a" else TensorProto.UINT32, None)
            for n in ("amax", "amin", "bmax", "bmin")]
    model = _model(nodes, [helper.make_tensor_value_info("a", TensorProto.UINT64, None),
                           helper.make_tensor_value_info("b", TensorProto.UINT32, None)], outs, opset=17)
    got, ref = _run_both(model, {"a": a, "b": b}, target)
    for o, g, r in zip(outs, got, ref):
        _same_bits(g, r, f"{target}: {o.name}")


# ---- BitCast, bitwise on signed ints, inverse trigonometry ---------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_bitcast_and_bitwise(target):
    x = np.array([1.0, -2.5, np.inf, -0.0, np.nan, 3e-40], dtype=np.float32)
    i = np.array([-1, 0, 5, -128, 127, 64], dtype=np.int8)
    nodes = [helper.make_node("BitCast", ["x"], ["xi"], to=TensorProto.INT32),
             helper.make_node("BitCast", ["xi"], ["xf"], to=TensorProto.FLOAT),
             helper.make_node("BitCast", ["i"], ["iu"], to=TensorProto.UINT8),
             helper.make_node("BitwiseNot", ["i"], ["inot"]),
             helper.make_node("BitwiseAnd", ["i", "j"], ["iand"]),
             helper.make_node("BitwiseXor", ["i", "j"], ["ixor"])]
    outs = [("xi", TensorProto.INT32), ("xf", TensorProto.FLOAT), ("iu", TensorProto.UINT8),
            ("inot", TensorProto.INT8), ("iand", TensorProto.INT8), ("ixor", TensorProto.INT8)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT8, None),
                           helper.make_tensor_value_info("j", TensorProto.INT8, None)],
                   [helper.make_tensor_value_info(n, c, None) for n, c in outs], opset=26)
    j = np.array([3, -3, 6, 127, -1, 64], dtype=np.int8)
    got, ref = _run_both(model, {"x": x, "i": i, "j": j}, target)
    for (name, _), g, r in zip(outs, got, ref):
        if name == "xf":     # NaN payload and all: the bits come back unchanged
            np.testing.assert_array_equal(np.asarray(g).view(np.int32), x.view(np.int32))
        _same_bits(g, r, f"{target}: {name}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("np_type", [np.float32, np.float64])
def test_inverse_trigonometry(target, np_type):
    x = np.array([-1, -0.5, 0, -0.0, 0.3, 1, 1.5, -7, np.nan, np.inf, -np.inf, 1e-30], dtype=np_type)
    code = helper.np_dtype_to_tensor_dtype(np.dtype(np_type))
    ops = ("Asin", "Acos", "Atan")
    model = _model([helper.make_node(op, ["x"], [op]) for op in ops], [helper.make_tensor_value_info("x", code, None)],
                   [helper.make_tensor_value_info(op, code, None) for op in ops])
    got, ref = _run_both(model, {"x": x}, target)
    for op, g, r in zip(ops, got, ref):
        g, r = np.asarray(g), np.asarray(r)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(r), err_msg=f"{target}: {op} NaN")
        np.testing.assert_allclose(g, r, rtol=1e-6, atol=0, err_msg=f"{target}: {op}")
