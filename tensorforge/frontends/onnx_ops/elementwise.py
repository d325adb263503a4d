"""Elementwise ONNX ops: math, activations, comparisons, logic, casts, variadic Sum/Mean/Max/Min.

Activations without a graph op of their own are written as the exact composition of graph
ops (Softsign = x / (1 + |x|), HardSwish = x * hard_sigmoid(x), ...).
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from ...ir.lowbits import E8M0_ROUND_MODES
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .dtypes import onnx_type_name, to_dtype
from .registry import handles

_UNARY = {
    "Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
    "Tanh": "tanh", "Sigmoid": "sigmoid", "Erf": "erf", "Relu": "relu", "Sin": "sin", "Cos": "cos",
    "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Not": "not", "Softplus": "softplus",
    "Asin": "asin", "Acos": "acos", "Atan": "atan",
}

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "and", "Or": "or", "Xor": "xor",
           "Equal": "eq", "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge"}


def _legacy_broadcast(node: OnnxNode) -> None:
    """Opsets before 7 had explicit ``broadcast``/``axis``; only the NumPy-compatible form is taken."""
    if node.has_attr("axis"):
        raise node.unsupported("legacy 'axis' broadcasting (opset < 7) is not supported")
    node.attr("broadcast", 0)
    node.ignore("consumed_inputs")


@handles(*_UNARY)
def unary(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    return ctx.op(_UNARY[node.op_type], node.required(0))


@handles(*_BINARY)
def binary(ctx: ImportContext, node: OnnxNode) -> Value:
    _legacy_broadcast(node)
    a, b = node.required(0), node.required(1)
    return ctx.op(_BINARY[node.op_type], a, b)


@handles("Pow")
def pow_(ctx: ImportContext, node: OnnxNode) -> Value:
    _legacy_broadcast(node)
    x, y = node.required(0), node.required(1)
    return ctx.op("pow", x, ctx.cast(y, ctx.dtype(x)))


@handles("Mod")
def mod(ctx: ImportContext, node: OnnxNode) -> Value:
    fmod = node.attr("fmod", 0)
    return ctx.op("fmod" if fmod else "mod", node.required(0), node.required(1))


@handles("Where")
def where(ctx: ImportContext, node: OnnxNode) -> Value:
    return ctx.op("select", node.required(0), node.required(1), node.required(2))


@handles("Identity")
def identity(ctx: ImportContext, node: OnnxNode) -> Value:
    return node.required(0)


@handles("Sum", "Mean", "Max", "Min")
def variadic(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    xs = [x for x in node.inputs if x is not None]
    if not xs:
        raise node.unsupported("needs at least one input")
    name = {"Sum": "add", "Mean": "add", "Max": "max", "Min": "min"}[node.op_type]
    if len(xs) == 1:
        return ctx.op("identity", xs[0])
    acc = xs[0]
    for x in xs[1:]:
        acc = ctx.op(name, acc, x)
    if node.op_type == "Mean":
        acc = ctx.op("div", acc, ctx.scalar(len(xs), acc))
    return acc


@handles("Cast")
def cast(ctx: ImportContext, node: OnnxNode) -> Value:
    to = node.attr("to")
    if isinstance(to, str):  # opset 1 spelled the type as a string
        raise node.unsupported("the string form of 'to' (opset 1) is not supported")
    dtype = to_dtype(to)
    if dtype is None:
        raise node.unsupported(f"casting to {onnx_type_name(to)} is not supported")
    return _cast_to(ctx, node, dtype)


def _cast_to(ctx: ImportContext, node: OnnxNode, dtype: DType) -> Value:
    # saturate (opset 19+) only matters for float8 targets: out-of-range values and infinities
    # clamp to the largest finite value (default) or become inf/NaN; round_mode only for E8M0.
    saturate = node.attr("saturate", 1) if node.opset >= 19 else 1
    round_mode = node.attr("round_mode", "up")
    if round_mode not in E8M0_ROUND_MODES:
        raise node.invalid(f"round_mode={round_mode!r} (one of {', '.join(E8M0_ROUND_MODES)})")
    x = node.required(0)
    if dtype is ctx.dtype(x):
        return ctx.op("identity", x)
    mode = round_mode if dtype is DType.f8e8m0 and round_mode != "up" else None
    return ctx.op("cast", x, dtype=dtype, saturate=None if saturate else False, round_mode=mode)


@handles("CastLike")
def cast_like(ctx: ImportContext, node: OnnxNode) -> Value:
    return _cast_to(ctx, node, ctx.dtype(node.required(1)))


@handles("BitCast")
def bitcast(ctx: ImportContext, node: OnnxNode) -> Value:
    """The bits of each element read as ``to``; only between types of one size (the shape stays)."""
    x = node.required(0)
    to = node.attr("to")
    dtype = to_dtype(to)
    if dtype is None:
        raise node.unsupported(f"bitcasting to {onnx_type_name(to)} is not supported")
    src = ctx.dtype(x)
    if src.itemsize != dtype.itemsize or src.is_storage_only or dtype.is_storage_only:
        raise node.unsupported(f"bitcasting {src} to {dtype} (only between types of the same byte size)")
    if src is dtype:
        return ctx.op("identity", x)
    return ctx.op("bitcast", x, dtype=dtype)


@handles("Clip")
def clip(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    dtype = ctx.dtype(x)
    if node.opset < 11:
        lo, hi = node.attr("min", None), node.attr("max", None)
        node.ignore("consumed_inputs")
        bounds: list = [lo, hi]
    else:
        bounds = []
        for v in (node.input(1), node.input(2)):
            if v is None:
                bounds.append(None)
                continue
            known = ctx.value_of(v)
            bounds.append(float(np.asarray(known).reshape(-1)[0]) if known is not None and dtype.is_float else
                          (known if known is not None else v))
    if dtype.is_float and all(b is None or isinstance(b, float) for b in bounds):
        return ctx.op("clip", x, min=bounds[0], max=bounds[1])
    y = x
    for b, name in zip(bounds, ("max", "min")):
        if b is None:
            continue
        bv = b if isinstance(b, Value) else ctx.scalar(np.asarray(b).reshape(-1)[0], dtype)
        y = ctx.op(name, y, ctx.cast(bv, dtype))
    return y


# ---- activations ------------------------------------------------------------------------------
@handles("LeakyRelu")
def leaky_relu(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    return ctx.op("leaky_relu", node.required(0), alpha=node.attr("alpha", 0.01))


def onnx_elu(ctx: ImportContext, x: Value, alpha: float) -> Value:
    """ONNX's Elu as its spec writes it, alpha * (exp(x) - 1) below 0, as onnxruntime computes
    it: a tiny negative x gives 0 there, where graph.elu (PyTorch's expm1) keeps x."""
    a = ctx.scalar(alpha, x)
    neg = ctx.op("mul", a, ctx.op("sub", ctx.op("exp", x), ctx.scalar(1, x)))
    return ctx.op("select", ctx.op("ge", x, ctx.scalar(0, x)), x, neg)


@handles("Elu")
def elu(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    return onnx_elu(ctx, node.required(0), node.attr("alpha", 1.0))


@handles("Selu")
def selu(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    # The spec's own formula, gamma * (alpha * exp(x) - alpha) for x <= 0, as onnxruntime and
    # onnx.reference compute it: Selu(-0.0) is +0.0 there (1 / Selu(-0.0) = +inf), where an Elu
    # (PyTorch's selu, expm1) keeps the -0.0.  PyTorch models come through the torch frontend and
    # keep PyTorch's sign.
    x = node.required(0)
    alpha = ctx.scalar(node.attr("alpha", 1.67326319217681884765625), x)
    gamma = ctx.scalar(node.attr("gamma", 1.05070102214813232421875), x)
    neg = ctx.op("sub", ctx.op("mul", alpha, ctx.op("exp", x)), alpha)
    return ctx.op("mul", gamma, ctx.op("select", ctx.op("gt", x, ctx.scalar(0, x)), x, neg))


@handles("Celu")
def celu(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    alpha = node.attr("alpha", 1.0)
    a = ctx.scalar(alpha, x)
    neg = ctx.op("mul", a, ctx.op("sub", ctx.op("exp", ctx.op("div", x, a)), ctx.scalar(1, x)))
    return ctx.op("select", ctx.op("gt", x, ctx.scalar(0, x)), x, neg)


@handles("HardSigmoid")
def hard_sigmoid(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    return ctx.op("hard_sigmoid", node.required(0), alpha=node.attr("alpha", 0.2), beta=node.attr("beta", 0.5))


@handles("HardSwish")
def hard_swish(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    return ctx.op("mul", x, ctx.op("hard_sigmoid", x, alpha=1.0 / 6.0, beta=0.5))


@handles("Softsign")
def softsign(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    return ctx.op("div", x, ctx.op("add", ctx.op("abs", x), ctx.scalar(1, x)))


@handles("Mish")
def mish(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    return ctx.op("mul", x, ctx.op("tanh", ctx.op("softplus", x)))


@handles("Swish")
def swish(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    alpha = node.attr("alpha", 1.0)
    if alpha == 1.0:
        return ctx.op("silu", x)
    return ctx.op("mul", x, ctx.op("sigmoid", ctx.op("mul", x, ctx.scalar(alpha, x))))


@handles("ThresholdedRelu")
def thresholded_relu(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    alpha = node.attr("alpha", 1.0)
    return ctx.op("select", ctx.op("gt", x, ctx.scalar(alpha, x)), x, ctx.scalar(0, x))


@handles("Shrink")
def shrink(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    zero = ctx.scalar(0, x)
    below = ctx.op("select", ctx.op("lt", x, ctx.scalar(-lambd, x)), ctx.op("add", x, ctx.scalar(bias, x)), zero)
    return ctx.op("select", ctx.op("gt", x, ctx.scalar(lambd, x)), ctx.op("sub", x, ctx.scalar(bias, x)), below)


@handles("PRelu")
def prelu(ctx: ImportContext, node: OnnxNode) -> Value:
    node.ignore("consumed_inputs")
    x, slope = node.required(0), node.required(1)
    return ctx.op("select", ctx.op("lt", x, ctx.scalar(0, x)), ctx.op("mul", x, slope), x)


@handles("Gelu")
def gelu(ctx: ImportContext, node: OnnxNode) -> Value:
    approximate = node.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise node.unsupported(f"approximate='{approximate}'")
    return ctx.op("gelu", node.required(0), approximate=approximate)


# ---- trigonometry and friends written with exp/log/sqrt ---------------------------------------
@handles("Tan")
def tan(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    return ctx.op("div", ctx.op("sin", x), ctx.op("cos", x))


@handles("Sinh", "Cosh")
def sinh_cosh(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    ep, em = ctx.op("exp", x), ctx.op("exp", ctx.op("neg", x))
    both = ctx.op("sub" if node.op_type == "Sinh" else "add", ep, em)
    return ctx.op("mul", both, ctx.scalar(0.5, x))


@handles("Asinh")
def asinh(ctx: ImportContext, node: OnnxNode) -> Value:
    # sign(x) * log(|x| + sqrt(x^2 + 1)) avoids cancellation for negative x.
    x = node.required(0)
    ax = ctx.op("abs", x)
    root = ctx.op("sqrt", ctx.op("add", ctx.op("mul", x, x), ctx.scalar(1, x)))
    return ctx.op("mul", ctx.op("sign", x), ctx.op("log", ctx.op("add", ax, root)))


@handles("Acosh")
def acosh(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    root = ctx.op("sqrt", ctx.op("sub", ctx.op("mul", x, x), ctx.scalar(1, x)))
    return ctx.op("log", ctx.op("add", x, root))


@handles("Atanh")
def atanh(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    one = ctx.scalar(1, x)
    ratio = ctx.op("div", ctx.op("add", one, x), ctx.op("sub", one, x))
    return ctx.op("mul", ctx.op("log", ratio), ctx.scalar(0.5, x))


@handles("IsNaN")
def isnan(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    return ctx.op("ne", x, x)


@handles("IsInf")
def isinf(ctx: ImportContext, node: OnnxNode) -> Value:
    x = node.required(0)
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    checks = []
    if pos:
        checks.append(ctx.op("eq", x, ctx.scalar(np.inf, x)))
    if neg:
        checks.append(ctx.op("eq", x, ctx.scalar(-np.inf, x)))
    if not checks:  # all false: |x| < -1 holds for no value, NaN included
        return ctx.op("lt", ctx.op("abs", x), ctx.scalar(-1, x))
    return checks[0] if len(checks) == 1 else ctx.op("or", checks[0], checks[1])


@handles("Binarizer")  # ai.onnx.ml
def binarizer(ctx: ImportContext, node: OnnxNode) -> Value:
    """1 where x > threshold, else 0, in x's type (NaN compares false: 0)."""
    x = node.required(0)
    hot = ctx.op("gt", x, ctx.scalar(float(node.attr("threshold", 0.0)), x))
    return ctx.op("select", hot, ctx.scalar(1, x), ctx.scalar(0, x))
