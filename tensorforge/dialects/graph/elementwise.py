"""Elementwise math: unary functions, binary arithmetic, comparisons, select, cast, clip."""
from __future__ import annotations

import math

import numpy as np

from ...ir import lowbits
from ...ir.opdef import ELEMENTWISE, PURE, Attr, FusionKind, OpDef, expect, register
from ...ir.types import DType, TensorType
from .base import (BinaryElementwise, CommutativeBinary, UnaryElementwise, broadcast_shapes, promote,
                   tensor_types)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    return _erf(x.astype(np.float64)).astype(x.dtype) if x.size else x.copy()


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return (1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)


def _gelu(x, approximate="none"):
    x64 = x.astype(np.float64)
    if approximate == "tanh":
        y = 0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    else:
        y = 0.5 * x64 * (1.0 + erf(x64 / math.sqrt(2.0)))
    return y.astype(x.dtype)


def _unary(opname: str, fn, flops: float = 1.0, float_only: bool = False, **extra):
    cls = type(opname.title().replace("_", ""), (UnaryElementwise,),
               {"name": f"graph.{opname}", "compute": staticmethod(fn), "flops": flops,
                "float_only": float_only, "doc": extra.get("doc", f"Elementwise {opname}."),
                "__module__": __name__})
    register(cls)
    return cls


def _with_errstate(fn):
    def run(*a, **k):
        with np.errstate(all="ignore"):
            return fn(*a, **k)
    return run


_unary("neg", np.negative)
_unary("abs", np.abs)
_unary("exp", _with_errstate(np.exp), 8, True)
_unary("log", _with_errstate(np.log), 8, True)
_unary("sqrt", _with_errstate(np.sqrt), 4, True)
_unary("rsqrt", _with_errstate(lambda x: (1.0 / np.sqrt(x)).astype(x.dtype)), 5, True)
_unary("reciprocal", _with_errstate(lambda x: (1.0 / x).astype(x.dtype)), 1, True)
_unary("tanh", np.tanh, 10, True)
_unary("sigmoid", _sigmoid, 10, True)
_unary("erf", erf, 12, True)
_unary("relu", lambda x: np.maximum(x, np.zeros((), x.dtype)))
_unary("sin", np.sin, 10, True)
_unary("cos", np.cos, 10, True)
_unary("asin", _with_errstate(np.arcsin), 12, True)
_unary("acos", _with_errstate(np.arccos), 12, True)
_unary("atan", np.arctan, 12, True)
_unary("floor", np.floor, 1, True)
_unary("ceil", np.ceil, 1, True)
_unary("round", np.round, 1, True)     # round half to even, as ONNX Round
_unary("sign", np.sign)
_unary("not", np.logical_not, doc="Logical not of a bool tensor.")
_unary("bitwise_not", np.invert, doc="Bitwise complement of an integer tensor (logical not of a bool one).")
_unary("softplus", _with_errstate(lambda x: np.logaddexp(0, x.astype(np.float64)).astype(x.dtype)), 10, True)
_unary("silu", lambda x: (x * _sigmoid(x)).astype(x.dtype), 11, True)
_unary("identity", lambda x: x.copy(), 0)


@register
class Gelu(UnaryElementwise):
    name = "graph.gelu"
    attrs = {"approximate": Attr("str", "none", "'none' (erf) or 'tanh'")}
    flops = 16
    float_only = True
    compute = staticmethod(_gelu)

    def verify(self, op):
        expect(op.attributes["approximate"] in ("none", "tanh"), "approximate must be 'none' or 'tanh'")


@register
class LeakyRelu(UnaryElementwise):
    name = "graph.leaky_relu"
    attrs = {"alpha": Attr("float", 0.01)}
    flops = 2
    float_only = True

    @staticmethod
    def compute(x, alpha):
        return np.where(x >= 0, x, x * x.dtype.type(alpha))


@register
class Elu(UnaryElementwise):
    name = "graph.elu"
    attrs = {"alpha": Attr("float", 1.0)}
    flops = 10
    float_only = True

    @staticmethod
    def compute(x, alpha):
        # PyTorch's ELU: alpha * expm1(x) below 0, so -0.0 stays -0.0 and a tiny x keeps its
        # value (ONNX's Elu, alpha * (exp(x) - 1), is spelled out by the ONNX frontend)
        with np.errstate(over="ignore"):
            return np.where(x >= 0, x, (alpha * np.expm1(x.astype(np.float64)))).astype(x.dtype)


@register
class HardSigmoid(UnaryElementwise):
    name = "graph.hard_sigmoid"
    attrs = {"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)}
    flops = 4
    float_only = True

    @staticmethod
    def compute(x, alpha, beta):
        return np.clip(x * x.dtype.type(alpha) + x.dtype.type(beta), 0, 1).astype(x.dtype)


def relu_epilogue(op) -> dict | None:
    """The kernel epilogue attributes (``relu``, and ``clip_max`` for ReLU6) that do what ``op`` does
    when it is a relu or a clip from 0, else None: the contraction kernels with fused epilogues
    (``qconv``, ``bf16_conv``, ``conv_nchwc``) take either."""
    if op is None:
        return None
    if op.name == "graph.relu":
        return {"relu": True}
    if op.name == "graph.clip" and op.attributes.get("min") == 0.0:
        hi = op.attributes.get("max")
        return {"relu": True} | ({"clip_max": float(hi)} if hi is not None else {})
    return None


@register
class Clip(UnaryElementwise):
    """Clamp to [min, max]; a missing bound is unbounded (ReLU6 is clip(0, 6))."""

    name = "graph.clip"
    attrs = {"min": Attr("float", None), "max": Attr("float", None)}
    flops = 2

    @staticmethod
    def compute(x, min=None, max=None):
        # compare-and-select as torch.clamp and the native kernel: a value equal to the bound stays
        # itself (clip(-0.0, min=0) is -0.0; np.maximum would give +0.0), NaN passes through
        y = x
        if min is not None:
            lo = np.asarray(min).astype(x.dtype)
            y = np.where(y < lo, lo, y)
        if max is not None:
            hi = np.asarray(max).astype(x.dtype)
            y = np.where(y > hi, hi, y)
        return np.asarray(y, dtype=x.dtype)


def _binary(opname: str, fn, base=BinaryElementwise, flops: float = 1.0, result_dtype=None, doc=""):
    cls = type(opname.title().replace("_", ""), (base,),
               {"name": f"graph.{opname}", "compute": staticmethod(fn), "flops": flops,
                "result_dtype": result_dtype, "doc": doc or f"Elementwise {opname} with broadcasting.",
                "__module__": __name__})
    register(cls)
    return cls


def _div(a, b):
    if np.issubdtype(a.dtype, np.integer):
        # ONNX Div on integers truncates toward zero (C semantics), unlike NumPy's floor division;
        # in integers (exact for 64-bit values too), a zero divisor gives 0 as NumPy does.
        with np.errstate(all="ignore"):
            q = np.floor_divide(a, b)
            if a.dtype.kind == "i":
                r = a - q * b
                q = np.where((r != 0) & ((a < 0) != (b < 0)), q + 1, q)
        return q.astype(a.dtype)
    with np.errstate(all="ignore"):
        return np.divide(a, b)


def _mod(a, b):
    with np.errstate(all="ignore"):
        return np.mod(a, b)


def _pow(a, b):
    """C99 ``pow`` (what the native code, onnxruntime and PyTorch compute).  NumPy computes
    ``x ** 0.5`` as ``sqrt(x)``, which differs at two points: pow(-inf, 0.5) is +inf (sqrt: NaN)
    and pow(-0.0, 0.5) is +0.0 (sqrt: -0.0)."""
    with np.errstate(all="ignore"):
        out = np.power(a.astype(np.float64) if a.dtype.kind == "f" else a, b).astype(a.dtype)
    if a.dtype.kind == "f":
        half = np.asarray(b) == 0.5
        if half.any():
            a_b, half_b, out = np.broadcast_arrays(a, half, out)
            out = out.copy()
            out[half_b & (a_b == -np.inf)] = np.inf
            out[half_b & (a_b == 0)] = 0.0
    return out


_binary("add", np.add, CommutativeBinary)
_binary("sub", np.subtract)
_binary("mul", np.multiply, CommutativeBinary)
_binary("div", _div, flops=1)
_binary("pow", _pow, flops=10)
_binary("max", np.maximum, CommutativeBinary)
_binary("min", np.minimum, CommutativeBinary)
_binary("mod", _mod, doc="Remainder with the sign of the divisor (NumPy/Python semantics).")
_binary("fmod", lambda a, b: np.fmod(a, b), doc="Remainder with the sign of the dividend (C fmod).")
_binary("bitwise_and", np.bitwise_and, CommutativeBinary)
_binary("bitwise_or", np.bitwise_or, CommutativeBinary)
_binary("bitwise_xor", np.bitwise_xor, CommutativeBinary)
_binary("and", np.logical_and, CommutativeBinary)
_binary("or", np.logical_or, CommutativeBinary)
_binary("xor", np.logical_xor, CommutativeBinary)
_binary("eq", np.equal, CommutativeBinary, result_dtype=DType.bool)
_binary("ne", np.not_equal, CommutativeBinary, result_dtype=DType.bool)
_binary("lt", np.less, result_dtype=DType.bool)
_binary("le", np.less_equal, result_dtype=DType.bool)
_binary("gt", np.greater, result_dtype=DType.bool)
_binary("ge", np.greater_equal, result_dtype=DType.bool)


@register
class Select(OpDef):
    """``where(cond, a, b)`` with broadcasting of all three operands."""

    name = "graph.select"
    operands = ("cond", "lhs", "rhs")
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1

    def infer(self, types, attrs):
        c, a, b = tensor_types(types, self.name)
        expect(c.dtype is DType.bool, f"condition must be i1 (bool), got {c.dtype}")
        return [TensorType(broadcast_shapes(c.shape, a.shape, b.shape), promote(a.dtype, b.dtype))]

    @staticmethod
    def compute(c, a, b):
        return np.where(c, a, b)


@register
class Cast(OpDef):
    """Element type conversion (float to int truncates toward zero).

    A cast to a storage-only type rounds as ``ir/lowbits.py`` says (float8: ``saturate``, default
    true, clamps out-of-range values and infinities to the largest finite value).  ``via`` names a
    storage-only type to round through first: ``cast(x, dtype=f32, via=f8E4M3FN)`` is
    ``cast(cast(x, f8E4M3FN), f32)`` in one op (native lowering holds those types widened).
    """

    name = "graph.cast"
    operands = ("x",)
    attrs = {"dtype": Attr("dtype"),
             "saturate": Attr("bool", None, "float8 targets: saturate out-of-range values (default true)"),
             "via": Attr("dtype", None, "a storage-only type to round through first"),
             "round_mode": Attr("str", None, "float8 E8M0 targets: 'up' (default), 'down' or 'nearest'")}
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        mode = attrs.get("round_mode")
        expect(mode is None or (mode in lowbits.E8M0_ROUND_MODES and DType.f8e8m0 in (attrs["dtype"], attrs.get("via"))),
               f"round_mode={mode!r} is for casts to f8E8M0FNU, one of {lowbits.E8M0_ROUND_MODES}")
        return [TensorType(x.shape, attrs["dtype"])]

    @staticmethod
    def compute(x, dtype, saturate=None, via=None, round_mode=None):
        with np.errstate(all="ignore"):
            if via is not None:
                x = lowbits.convert(x, via, saturate is not False, round_mode)
            if dtype.is_storage_only and dtype is not DType.bf16:
                return lowbits.convert(x, dtype, saturate is not False, round_mode)
            if dtype is DType.bf16:
                as_int = x.astype(np.float32).view(np.uint32)
                rounded = ((as_int + 0x7FFF + ((as_int >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
                return rounded.view(np.float32)
            return x.astype(dtype.np)


@register
class Bitcast(OpDef):
    """Reinterprets the bits of each element as another type of the same size (ONNX BitCast)."""

    name = "graph.bitcast"
    operands = ("x",)
    attrs = {"dtype": Attr("dtype")}
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE
    flops = 0

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        dt = attrs["dtype"]
        expect(x.dtype.itemsize == dt.itemsize and not x.dtype.is_storage_only and not dt.is_storage_only,
               f"bitcast needs two types of the same size that hold their own bits, got {x.dtype} -> {dt}")
        return [TensorType(x.shape, dt)]

    @staticmethod
    def compute(x, dtype):
        y = np.array(x, order="C").view(dtype.np)    # (ascontiguousarray makes a 0-d array 1-d)
        return y != 0 if dtype is DType.bool else y
