"""loop.func -> C source.

Every SSA value becomes a ``const`` local (gcc's SSA makes that free), buffers are flat pointers
indexed row-major, loop kinds become OpenMP/GCC pragmas (a vectorized reduction loop gets the
``reduction(...)`` clause of the scalar accumulators it updates), ``loop.if`` becomes ``if``.
Scalar ops map to C through one table.  float32 ``exp`` and ``erf`` (and the ops built on them:
sigmoid, silu, elu, softplus, GELU) call the inline functions of ``vmath.py``, which gcc vectorizes
with the loop around them; the other transcendental functions use libm names so that
``-ffast-math`` with glibc's vector math library vectorizes them.
"""
from __future__ import annotations

import math
from contextvars import ContextVar
from typing import Callable

from ...errors import CompileError
from ...ir.core import Operation, Value
from ...ir.symbolic import SYMBOLS_ATTR, c_identifier, symbol_table_of, symbols_of, to_c
from ...ir.types import BufferType, DType, IndexType, ScalarType
from ...schedule.analysis import flat_runs
from . import lowbits_c, vmath

C_TYPES = {DType.f32: "float", DType.f64: "double", DType.i64: "int64_t", DType.i32: "int32_t",
           DType.i16: "int16_t", DType.i8: "int8_t", DType.u8: "uint8_t", DType.bool: "bool",
           DType.f16: "_Float16", DType.u16: "uint16_t", DType.u32: "uint32_t", DType.u64: "uint64_t"}
# Storage-only types (ir/lowbits.py) are widened before lowering: scalars hold them in the compute type.
C_TYPES.update({d: C_TYPES[d.compute_type] for d in DType if d.is_storage_only and d is not DType.bf16})

PRELUDE = r"""#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#if !defined(__FAST_MATH__) && defined(__GNUC__) && !defined(__clang__)
/* IEEE builds: every operation of a loop kernel rounds, as the IR says.  gcc's default
   -ffp-contract=fast fuses a multiply with an add across statements, also through a value stored
   to a temporary and read back: softmax's ``x - max(x)`` with ``x`` a product became
   ``fma(a, b, -max)``, the product's rounding error (1e22 at 1e29) rather than 0, and exp of it
   inf.  Only the loop kernels are compiled without contraction (the helpers above them inline
   into them; hand-written kernels that want FMAs, the micro-kernels and depthwise routines, keep
   them). */
#define TF_ROUND_EACH_BEGIN _Pragma("GCC push_options") _Pragma("GCC optimize(\"fp-contract=off\")")
#define TF_ROUND_EACH_END _Pragma("GCC pop_options")
#else
#define TF_ROUND_EACH_BEGIN
#define TF_ROUND_EACH_END
#endif
/* Kernels that divide and round to integers (quantization) keep their divisions exact under
   -ffast-math (see _exact_division).  IEEE builds need nothing: the attribute would only stop gcc
   inlining the vector-math helpers into such a kernel (measured 20x slower on gelu + quantize). */
#ifdef __FAST_MATH__
#define TF_EXACT_DIVISION __attribute__((optimize("no-unsafe-math-optimizations")))
#else
#define TF_EXACT_DIVISION
#endif
/* A vectorized float sum starts each lane at -0.0, the IEEE identity of addition.  OpenMP's
   reduction(+) starts them at +0.0, and +0.0 + -0.0 is +0.0: a sum of only -0.0s (a cumsum's
   prefix of -0.0, started from -0.0) lost its sign once its loop was vectorized. */
#pragma omp declare reduction(tf_fadd : float : omp_out += omp_in) initializer(omp_priv = -0.0f)
#pragma omp declare reduction(tf_dadd : double : omp_out += omp_in) initializer(omp_priv = -0.0)
/* A max/min over threads: each starts from the identity (-inf/+inf; OpenMP's own max/min start
   from -FLT_MAX/FLT_MAX, which an all-infinite input would return) and a NaN on either side wins,
   as in the kernels' own NaN-propagating compares. */
#pragma omp declare reduction(tf_fmax : float : omp_out = (omp_out > omp_in) | (omp_out != omp_out) ? omp_out : omp_in) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(tf_fmin : float : omp_out = (omp_out < omp_in) | (omp_out != omp_out) ? omp_out : omp_in) initializer(omp_priv = INFINITY)
#pragma omp declare reduction(tf_dmax : double : omp_out = (omp_out > omp_in) | (omp_out != omp_out) ? omp_out : omp_in) initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(tf_dmin : double : omp_out = (omp_out < omp_in) | (omp_out != omp_out) ? omp_out : omp_in) initializer(omp_priv = INFINITY)
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
/* gcc 12's loop if-conversion miscompiles padded reads ``(in bounds) ? x[i] : pad`` once the
   vectorizer turns them into masked loads of a fully unrolled loop: the second ``vmaskmovps``
   reused the first one's mask, so rows inside the input read 0 (a 5x2 Pad by 2 rows, fuzzer seed
   11111, test_fuzz_pad_unrolled_mask.py).  Kernels with padded reads, and those that start an
   accumulator at -0.0 (see _no_if_conversion), are compiled without it there. */
#define TF_NO_IF_CONVERT __attribute__((optimize("no-tree-loop-if-convert")))
#else
#define TF_NO_IF_CONVERT
#endif
#if !defined(__FAST_MATH__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) \
    && defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
/* glibc declares its vector math library (libmvec) only under -ffast-math, yet its functions treat
   NaN and Inf as the scalar ones do: declared here, loops calling them vectorize in IEEE builds too. */
#define TF_SIMD __attribute__((simd("notinbranch")))
TF_SIMD float logf(float); TF_SIMD float log1pf(float); TF_SIMD float tanhf(float); TF_SIMD float sinf(float);
TF_SIMD float cosf(float); TF_SIMD float expf(float); TF_SIMD float erff(float); TF_SIMD float powf(float, float);
TF_SIMD double log(double); TF_SIMD double log1p(double); TF_SIMD double tanh(double); TF_SIMD double sin(double);
TF_SIMD double cos(double); TF_SIMD double exp(double); TF_SIMD double erf(double); TF_SIMD double pow(double, double);
#endif
static inline int64_t tf_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t tf_imod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
/* NaN tests and order keys on the bits: -ffast-math lets gcc assume no NaN/Inf in float compares. */
/* bf16 stored as its 16 bits; rounding to nearest even as the interpreter's cast does. */
static inline float tf_bf16_load(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t tf_bf16_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float tf_bf16_round(float f) { return tf_bf16_load(tf_bf16_bits(f)); }
static inline int tf_isnan_f32(float x) { uint32_t u; memcpy(&u, &x, 4); return (u & 0x7fffffffu) > 0x7f800000u; }
static inline int tf_isnan_f64(double x) { uint64_t u; memcpy(&u, &x, 8); return (u & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
static inline int tf_isnan_f16(_Float16 x) { uint16_t u; memcpy(&u, &x, 2); return (u & 0x7fffu) > 0x7c00u; }
static inline int64_t tf_key_f32(float x) { uint32_t u; memcpy(&u, &x, 4); return (u >> 31) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u; }
static inline int64_t tf_key_f64(double x) { uint64_t u; memcpy(&u, &x, 8); return (u >> 63) ? -(int64_t)(u & 0x7fffffffffffffffull) : (int64_t)u; }
static inline int64_t tf_key_f16(_Float16 x) { uint16_t u; memcpy(&u, &x, 2); return (u >> 15) ? -(int64_t)(u & 0x7fffu) : (int64_t)u; }
""" + lowbits_c.C_SOURCE + vmath.c_source()


# How index values (loop variables, subscripts) are spelled: C type and literal.  The C backend
# indexes in 64 bits; a GPU printer narrows to 32 bits when every buffer of a kernel fits, which
# halves the registers its address arithmetic takes.
INDEX_SPELLING: ContextVar[tuple[str, str]] = ContextVar("tensorforge_index_spelling",
                                                         default=("int64_t", "INT64_C({})"))


def c_type(t) -> str:
    """The C type of a scalar value (``ScalarType``/``DType``) or of a buffer/tensor element.

    bf16 has no C arithmetic type in gcc 12: its elements are stored as their 16 bits
    (``uint16_t``) and its scalar values computed as ``float`` (loads widen, stores round).
    """
    if isinstance(t, IndexType):
        return INDEX_SPELLING.get()[0]
    dt = t if isinstance(t, DType) else t.dtype
    if dt is DType.bf16:
        return "float" if isinstance(t, (DType, ScalarType)) else "uint16_t"
    try:
        return C_TYPES[dt]
    except KeyError:
        raise CompileError(f"element type {dt} has no C lowering yet (use f32/f64/int types)") from None


def _is_bf16_buffer(t) -> bool:
    return isinstance(t, BufferType) and t.dtype is DType.bf16


def _fsuffix(dt: DType) -> str:
    return "" if dt is DType.f64 else "f"


def c_literal(value, t) -> str:
    if isinstance(t, IndexType):
        return INDEX_SPELLING.get()[1].format(int(value))
    dt = t.dtype
    if dt is DType.bool:
        return "true" if value else "false"
    if dt.is_float:
        v = float(value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        s = repr(v)
        if "e" not in s and "." not in s:
            s += ".0"
        return s + ("" if dt is DType.f64 else "f")
    if dt is DType.i64:
        v = int(value)
        return "INT64_MIN" if v == -(2 ** 63) else f"INT64_C({v})"
    if dt in (DType.u32, DType.u64):
        lo, hi = dt.int_range
        return f"UINT{8 * dt.itemsize}_C({min(max(int(value), lo), hi)})"
    return str(int(value))


def _math_fn(name: str, x: str, dt: DType) -> str:
    """``name(x)`` in C: the inline vectorizable function for float32 where there is one, else libm."""
    inline = vmath.INLINE_FLOAT32.get(name)
    if inline is not None and dt is not DType.f64:
        return f"{inline}({x})"
    return f"{name}{_fsuffix(dt)}({x})"


def _sigmoid(x: str, dt: DType) -> str:
    """The inline float32 sigmoid (no overflow path, half the work of the formula), else
    ``1 / (1 + exp(-x))``."""
    if dt is not DType.f64 and "sigmoid" in vmath.INLINE_FLOAT32:
        return _math_fn("sigmoid", x, dt)
    return f"(1.0{_fsuffix(dt)} / (1.0{_fsuffix(dt)} + {_math_fn('exp', f'-{x}', dt)}))"


def _float_fn(name: str) -> Callable:
    return lambda a, dt: _math_fn(name, a[0], dt)


# C literal -> value, for the non-finite literals c_literal writes.
_NONFINITE = {"NAN": math.nan, "INFINITY": math.inf, "(-INFINITY)": -math.inf}
# Bit patterns of +inf (the order key of -inf is minus that).
_INF_KEY = {DType.f32: 0x7F800000, DType.f64: 0x7FF0000000000000, DType.f16: 0x7C00}
_BIT_NAME = {DType.f32: "f32", DType.f64: "f64", DType.f16: "f16"}


def _cmp(op: str):
    def emit(a, dt):
        if dt.is_float and dt in _BIT_NAME:
            return _float_cmp(op, a[0], a[1], dt)
        return f"({a[0]} {op} {a[1]})"
    return emit


def _float_cmp(op: str, x: str, y: str, dt: DType) -> str:
    """An IEEE comparison that survives ``-ffast-math``: gcc may assume that no operand is NaN or
    infinite and fold ``x != x`` or ``x == INFINITY`` to false (ONNX IsNaN/IsInf are built from them).
    NaN operands are tested on their bits; a comparison with an infinite literal compares order
    keys (the bits as a sign-magnitude integer), which no float assumption can fold away."""
    sfx = _BIT_NAME[dt]
    unordered = op == "!="
    lit = [_NONFINITE.get(v) for v in (x, y)]
    if any(v is not None and math.isnan(v) for v in lit):
        return "1" if unordered else "0"
    # Bitwise | and & on the 0/1 terms, not || and &&: branch-free, and gcc 12 at -O3
    # -march=znver1 miscompiles the vectorized short-circuit form (a select picking 0.0;
    # tests/testing/regressions/test_fuzz_183a6bbe65.py).
    nan = " | ".join(f"tf_isnan_{sfx}({v})" for v, c in zip((x, y), lit) if c is None)
    if any(c is not None for c in lit):
        keys = [f"tf_key_{sfx}({v})" if c is None else f"INT64_C({int(math.copysign(_INF_KEY[dt], c))})"
                for v, c in zip((x, y), lit)]
        ordered = f"({keys[0]} {op} {keys[1]})"
    else:
        ordered = f"({x} {op} {y})"
    if not nan:
        return ordered
    return f"(({nan}) | {ordered})" if unordered else f"(!({nan}) & {ordered})"


def _minmax(op: str):
    """max/min that propagate NaN as torch.maximum and ONNX Max do: a NaN operand wins.  (Under
    -ffast-math gcc folds the ``x != x`` test away: the plain compare-and-select.)"""
    def emit(a, dt):
        if dt.is_float:
            return f"((({a[0]} {op} {a[1]}) | ({a[0]} != {a[0]})) ? {a[0]} : {a[1]})"
        return f"({a[0]} {op} {a[1]} ? {a[0]} : {a[1]})"
    return emit


def _mod(a, dt):
    if dt.is_float:
        f = f"fmod{_fsuffix(dt)}"
        return f"({{__typeof__({a[0]}) r_ = {f}({a[0]}, {a[1]}); (r_ != 0 && ((r_ < 0) != ({a[1]} < 0))) ? r_ + {a[1]} : r_;}})"
    if dt.is_unsigned:
        return f"({a[1]} ? {a[0]} % {a[1]} : 0)"
    return f"tf_imod({a[0]}, {a[1]})"


def _gelu(a, dt, attrs):
    s = _fsuffix(dt)
    x = a[0]
    if attrs.get("approximate") == "tanh":
        if dt is not DType.f64 and "sigmoid" in vmath.INLINE_FLOAT32:
            # 0.5 x (1 + tanh(u)) = x sigmoid(2u): the inline sigmoid instead of a libmvec tanhf
            # call per vector (GPT-2's FFN epilogue), and no cancellation in 1 + tanh(u) for
            # negative x; inf, -inf (NaN, as 0.5 * -inf * 0) and NaN come out as torch's formula.
            return f"({x} * {_sigmoid(f'({x} * (1.5957691216057308f + 0.07135481627260025f * {x} * {x}))', dt)})"
        return f"(0.5{s} * {x} * (1.0{s} + tanh{s}(0.7978845608028654{s} * ({x} + 0.044715{s} * {x} * {x} * {x}))))"
    inline = vmath.INLINE_FLOAT32.get("gelu")
    if inline is not None and dt is not DType.f64:
        return f"{inline}({x})"
    return f"(0.5{s} * {x} * (1.0{s} + {_math_fn('erf', f'{x} * 0.7071067811865476{s}', dt)}))"


def _clip(a, dt, attrs):
    x = a[0]
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None:
        lit = c_literal(lo, ScalarType(dt))
        x = f"({x} < {lit} ? {lit} : {x})"
    if hi is not None:
        lit = c_literal(hi, ScalarType(dt))
        x = f"({x} > {lit} ? {lit} : {x})"
    return x


def _nonzero_literal(x: str) -> bool:
    """A C integer literal that is not zero (an integer division by it needs no zero guard)."""
    digits = x[x.index("(") + 1:-1] if x.endswith(")") and "_C(" in x else x
    return digits.lstrip("-").isdigit() and int(digits) != 0


def _cast(a, dt_in, attrs, result_t):
    target = c_type(result_t)
    via = attrs.get("via")
    if via is not None:   # rounding through a storage-only type (passes/lower/widen_bf16.py)
        a = [lowbits_c.cast_expr(a[0], dt_in, via, attrs.get("saturate"), c_type(via), attrs.get("round_mode"))]
        dt_in = via.compute_type
    if isinstance(result_t, ScalarType) and result_t.dtype.is_storage_only and result_t.dtype is not DType.bf16:
        return lowbits_c.cast_expr(a[0], dt_in, result_t.dtype, attrs.get("saturate"), target,
                                   attrs.get("round_mode"))
    if isinstance(result_t, ScalarType) and result_t.dtype is DType.bool:
        return f"({a[0]} != 0)"
    if isinstance(result_t, ScalarType) and result_t.dtype.is_float and dt_in.is_int:
        # An integer converts to +0.0, never -0.0, but with -fno-trapping-math gcc (12 at least,
        # match.pd) rewrites ``(float)(int)x`` as ``trunc(x)``, which is -0.0 for x in (-1, 0)
        # (and ``(float)(int)rintf(x)`` as ``rintf(x)``): ``1 / cast(cast(-0.5, i32), f32)`` came
        # out -inf.  Selecting +0 for a zero result keeps the sign (gcc folds a ``+ 0.0f``).
        as_float = "float" if result_t.dtype is DType.bf16 else target
        f = f"(({as_float}){a[0]})"
        f = f"({f} == 0 ? ({as_float})0 : {f})"
        return f"tf_bf16_round({f})" if result_t.dtype is DType.bf16 else f
    if isinstance(result_t, ScalarType) and result_t.dtype is DType.bf16:
        return f"tf_bf16_round((float){a[0]})"
    if isinstance(result_t, ScalarType) and result_t.dtype.is_int and result_t.dtype.itemsize < 4 and dt_in.is_float:
        # Through int32, the same bits on x86 (cvttss2si, NaN and out-of-range alike): gcc 12 does
        # not vectorize a loop with a direct float -> uint8 conversion ("control flow in loop"):
        # a QDQ BERT's GELU-and-requantize kernel ran 10x slower for it.
        return f"(({target})(int32_t){a[0]})"
    return f"(({target}){a[0]})"


# name -> fn(args, dtype) or fn(args, dtype, attrs)
_SIMPLE: dict[str, Callable] = {
    "add": lambda a, dt: f"({a[0]} + {a[1]})",
    "sub": lambda a, dt: f"({a[0]} - {a[1]})",
    "mul": lambda a, dt: f"({a[0]} * {a[1]})",
    "div": lambda a, dt: f"({a[0]} / {a[1]})" if dt.is_float or _nonzero_literal(a[1]) else f"({a[1]} ? {a[0]} / {a[1]} : 0)",
    "floordiv": lambda a, dt: f"tf_floordiv({a[0]}, {a[1]})",
    "index_cast": lambda a, dt: f"((int64_t){a[0]})",
    "mod": _mod,
    "fmod": lambda a, dt: f"fmod{_fsuffix(dt)}({a[0]}, {a[1]})" if dt.is_float else f"({a[0]} % {a[1]})",
    "pow": lambda a, dt: f"pow{_fsuffix(dt)}({a[0]}, {a[1]})",
    "max": _minmax(">"), "min": _minmax("<"),
    "and": lambda a, dt: f"({a[0]} & {a[1]})", "or": lambda a, dt: f"({a[0]} | {a[1]})",   # bools: branch-free
    "xor": lambda a, dt: f"({a[0]} != {a[1]})", "not": lambda a, dt: f"(!{a[0]})",
    "eq": _cmp("=="), "ne": _cmp("!="), "lt": _cmp("<"), "le": _cmp("<="), "gt": _cmp(">"), "ge": _cmp(">="),
    "neg": lambda a, dt: f"(-{a[0]})",
    "abs": lambda a, dt: f"fabs{_fsuffix(dt)}({a[0]})" if dt.is_float else f"({a[0]} < 0 ? -{a[0]} : {a[0]})",
    "exp": _float_fn("exp"), "log": _float_fn("log"), "sqrt": _float_fn("sqrt"), "tanh": _float_fn("tanh"),
    "erf": _float_fn("erf"), "sin": _float_fn("sin"), "cos": _float_fn("cos"), "floor": _float_fn("floor"),
    "ceil": _float_fn("ceil"), "round": _float_fn("nearbyint"),
    "rsqrt": lambda a, dt: f"(1.0{_fsuffix(dt)} / sqrt{_fsuffix(dt)}({a[0]}))",
    "reciprocal": lambda a, dt: f"(1.0{_fsuffix(dt)} / {a[0]})",
    "sigmoid": lambda a, dt: _sigmoid(a[0], dt),
    "silu": lambda a, dt: f"({a[0]} / (1.0{_fsuffix(dt)} + {_math_fn('exp', f'-{a[0]}', dt)}))",
    "softplus": lambda a, dt: f"({a[0]} > 20 ? {a[0]} : log1p{_fsuffix(dt)}({_math_fn('exp', a[0], dt)}))",
    "relu": lambda a, dt: f"({a[0]} < 0 ? 0 : {a[0]})",      # NaN and -0.0 pass through, as in torch
    "sign": lambda a, dt: (f"({a[0]} != {a[0]} ? {a[0]} : ({a[0]} > 0) - ({a[0]} < 0))" if dt.is_float
                           else f"(({a[0]} > 0) - ({a[0]} < 0))"),
    "identity": lambda a, dt: a[0],
    "select": lambda a, dt: f"({a[0]} ? {a[1]} : {a[2]})",
}
_SIMPLE.update({
    "bitwise_and": lambda a, dt: f"({a[0]} & {a[1]})", "bitwise_or": lambda a, dt: f"({a[0]} | {a[1]})",
    "bitwise_xor": lambda a, dt: f"({a[0]} ^ {a[1]})",
    "bitwise_not": lambda a, dt: f"(!{a[0]})" if dt is DType.bool else f"(~{a[0]})",
    "asin": _float_fn("asin"), "acos": _float_fn("acos"), "atan": _float_fn("atan"),
})
_WITH_ATTRS: dict[str, Callable] = {
    "gelu": _gelu, "clip": _clip,
    "leaky_relu": lambda a, dt, at: f"({a[0]} >= 0 ? {a[0]} : {a[0]} * {c_literal(at['alpha'], ScalarType(dt))})",
    "elu": lambda a, dt, at: f"({a[0]} >= 0 ? {a[0]} : {c_literal(at['alpha'], ScalarType(dt))} * "
                             f"{_math_fn('expm1', a[0], dt)})",
    "hard_sigmoid": lambda a, dt, at: _clip([f"({a[0]} * {c_literal(at['alpha'], ScalarType(dt))} + "
                                             f"{c_literal(at['beta'], ScalarType(dt))})"], dt,
                                            {"min": 0.0, "max": 1.0}),
}


_SIMD_COMBINERS = {"scalar.add": "+", "scalar.mul": "*", "scalar.max": "max", "scalar.min": "min"}
_SIGNED_ZERO_ADD = {"float": "tf_fadd", "double": "tf_dadd"}
# Vector accumulators per float sum of a vectorized reduction loop (FunctionEmitter.split_sum):
# enough adds in flight to cover the add latency of the cores we target.
SPLIT_SUM_VECTORS = 4


def scalar_expr(op: Operation, args: list[str]) -> str:
    """The C expression of one scalar op applied to already-named operands."""
    short = op.name.split(".", 1)[1]
    operand_t = op.operands[0].type if op.operands else op.results[0].type
    dt = DType.i64 if isinstance(operand_t, IndexType) else operand_t.dtype
    if short == "cast":
        return _cast(args, dt, op.attributes, op.results[0].type)
    if short == "bitcast":
        target = c_type(op.results[0].type)
        if op.results[0].type.dtype is DType.bool:
            return f"({args[0]} != 0)"
        return f"({{{target} r_; __typeof__({args[0]}) s_ = {args[0]}; memcpy(&r_, &s_, sizeof r_); r_;}})"
    if short in _WITH_ATTRS:
        return _WITH_ATTRS[short](args, dt, op.attributes)
    fn = _SIMPLE.get(short)
    if fn is None:
        raise CompileError(f"'{op.name}' has no C lowering")
    return fn(args, dt)


_ROUNDING = frozenset({"scalar.round", "scalar.floor", "scalar.ceil"})


def _exact_division(fn: Operation) -> str:
    """The attribute that keeps a kernel's float divisions exact when it also rounds to integers.

    Under ``-funsafe-math-optimizations`` gcc turns ``x / (a * b)`` into ``x * (1 / (a * b))`` and
    the like: an ulp lower, a quotient that is exactly .5 (quantization: ``round(x / scale)``)
    rounds the other way.  Only such kernels give up the fast-math rewrites, and only in fast-math
    builds (the ``TF_EXACT_DIVISION`` macro of the prelude): the attribute keeps gcc from inlining
    helpers compiled under other options, which an IEEE build has no reason to pay for.
    """
    def is_float(v: Value) -> bool:
        return isinstance(v.type, ScalarType) and v.type.dtype.is_float

    div = rounds = False
    for op in fn.walk():
        if op.name == "scalar.div" and is_float(op.results[0]):
            div = True
        elif op.name in _ROUNDING or (op.name == "scalar.cast" and is_float(op.operands[0])
                                      and not is_float(op.results[0])):
            rounds = True
    return "TF_EXACT_DIVISION " if div and rounds else ""


# Symbolic local buffers whose declared upper bound fits here live on the stack at that bound.
STACK_BYTES = 64 * 1024
DIMS_PARAM = "tf_dims"


def kernel_symbols(fn: Operation) -> list[str]:
    """The symbols a loop.func reads at run time (buffer shapes, loop bounds, ``scalar.dim``), sorted."""
    used: set[str] = set()

    def add_type(t) -> None:
        if isinstance(t, BufferType) and not t.is_static:
            for d in t.shape:
                used.update(symbols_of(d))

    for a in fn.regions[0].blocks[0].args:
        add_type(a.type)
    for op in fn.walk():
        if op.name == "loop.for":
            used.update(symbols_of(op.attributes["ub"]))
        elif op.name == "loop.alloc":
            add_type(op.attributes["type"])
        elif op.name == "scalar.dim":
            used.update(symbols_of(op.attributes["dim"]))
    return sorted(used)


class FunctionEmitter:
    """Emits one loop.func as a C function.

    ``symbols`` is the model's symbol order (``SymbolTable.ranges`` order, docs/dynamic_shapes.md):
    when given and not empty, the function takes a last parameter ``const int64_t* restrict tf_dims``
    and reads each symbol it uses from ``tf_dims[k]``, ``k`` its position in that order.  Without
    it, a function over symbolic shapes takes the order of its own ``tf.symbols`` attribute; a
    static function is emitted exactly as before.
    """

    # bool buffers read through uint8_t (see loop.load); a GPU dialect keeps its own pointer spelling
    bool_as_bytes = True

    def __init__(self, fn: Operation, c_name: str | None = None, static: bool = True,
                 symbols: list[str] | None = None):
        self.fn = fn
        self.c_name = c_name or fn.attributes["sym_name"]
        self.static = static
        self.used_symbols = kernel_symbols(fn)
        self.symbols = list(symbols) if symbols is not None else self._own_symbol_order()
        missing = [n for n in self.used_symbols if n not in self.symbols]
        if missing:
            raise CompileError(f"kernel '{self.c_name}' uses the symbols {missing}, which are not in the "
                               f"model's symbol order {self.symbols}")
        self.table = symbol_table_of(fn)
        self.names: dict[int, str] = {}
        self.scalars: set[int] = set()   # rank-0 buffers held as C locals
        self.lines: list[str] = []
        self.counter = 0
        self.parallel_depth = 0
        self.frees: list[str] = []
        self.nan_flags: dict[int, str] = {}    # id(max/min combiner) -> its NaN flag (see simd_nan_flags)

    def _own_symbol_order(self) -> list[str]:
        if not self.used_symbols:
            return []
        if self.fn.attributes.get(SYMBOLS_ATTR):
            return list(symbol_table_of(self.fn).ranges)
        return list(self.used_symbols)

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def name(self, v: Value) -> str:
        return self.names[id(v)]

    def emit(self) -> str:
        """The C text of the function."""
        body = self.fn.regions[0].blocks[0]
        n_in = self.fn.attributes["num_inputs"]
        params = []
        for i, a in enumerate(body.args):
            t = a.type
            nm = f"in{i}" if i < n_in else f"out{i - n_in}"
            self.names[id(a)] = nm
            const = "const " if i < n_in else ""
            params.append(f"{const}{c_type(t)}* restrict {nm}")
        if self.symbols:
            params.append(f"const int64_t* restrict {DIMS_PARAM}")
        head = (f"{_exact_division(self.fn)}{_no_if_conversion(self.fn)}{'static ' if self.static else ''}"
                f"void {self.c_name}({', '.join(params) or 'void'})")
        self.lines.append(head + " {")
        for name in self.used_symbols:
            self.lines.append(f"  const int64_t tf_sym_{c_identifier(name)} = {DIMS_PARAM}[{self.symbols.index(name)}];")
        self.block(body, 1)
        self.lines.append("}")
        return "TF_ROUND_EACH_BEGIN\n" + "\n".join(self.lines) + "\nTF_ROUND_EACH_END\n"

    def block(self, block, depth: int) -> None:
        """Emits ``block``; heap buffers allocated in a nested block are freed at its end (once per iteration)."""
        mark = len(self.frees)
        for op in block:
            self.op(op, depth)
        if block is not self.fn.regions[0].blocks[0]:
            for v in self.frees[mark:]:
                self.lines.append(f"{'  ' * depth}free({v});")
            del self.frees[mark:]

    def reduction_clauses(self, loop: Operation, threads: bool = False) -> str:
        """``reduction(op:acc)`` clauses for the scalar accumulators a reduction loop updates: of a
        vectorized loop (add/mul/max/min; float sums with the PRELUDE's -0.0-started ``tf_fadd``/
        ``tf_dadd``), or, ``threads``, of one on threads (max/min only, ``Schedule.parallel``:
        floats with the NaN-propagating ``tf_fmax``/``tf_fmin``, whose lanes start at -inf/+inf)."""
        clauses = []
        for inner in loop.walk():
            if inner.name != "loop.store" or id(inner.operands[1]) not in self.scalars:
                continue
            comb = inner.operands[0].op
            sym = _SIMD_COMBINERS.get(comb.name if comb is not None else "")
            if sym is None:
                raise CompileError(f"kernel '{self.c_name}': {'threaded' if threads else 'vectorized'} reduction loop "
                                   f"stores into an accumulator without an add/mul/max/min combiner")
            ct = C_TYPES.get(inner.operands[0].type.dtype)
            if threads:
                sym = {"float": f"tf_f{sym}", "double": f"tf_d{sym}"}.get(ct, sym)
            elif sym == "+":
                sym = _SIGNED_ZERO_ADD.get(ct, sym)
            clause = f"reduction({sym}:{self.name(inner.operands[1])})"
            if clause not in clauses:
                clauses.append(clause)
        return "".join(" " + c for c in clauses)

    def float_sum_accumulators(self, loop: Operation) -> list[Value] | None:
        """The scalar accumulators of a vectorized reduction loop when every one is a float sum
        (the body's only nested structure its own ops), else None."""
        accs: list[Value] = []
        for inner in loop.walk():
            if inner is not loop and inner.name == "loop.for":
                return None
            if inner.name != "loop.store" or id(inner.operands[1]) not in self.scalars:
                continue
            comb = inner.operands[0].op
            if comb is None or comb.name != "scalar.add" or C_TYPES.get(inner.operands[0].type.dtype) not in ("float", "double"):
                return None
            if all(acc is not inner.operands[1] for acc in accs):
                accs.append(inner.operands[1])
        return accs or None

    def split_sum(self, loop: Operation, v: str, ind: str, depth: int) -> bool:
        """Emits a vectorized float-sum loop with ``SPLIT_SUM_VECTORS`` vector accumulators per
        sum, or returns False (then the loop gets its ``simd reduction`` clause).

        ``#pragma omp simd reduction`` gives gcc one vector accumulator, so a row sum runs at one
        add per add latency (3 cycles on Zen 3) however wide the machine.  LayerNorm's three
        statistics loops over 768-wide rows (64 x 512 x 768, 2 threads, Zen 3) took 17.6 ms with
        it and 14.9 ms split by hand; with a GELU and a residual after the norm, 26.2 -> 23.7 ms
        by hand and 28.4 -> 25.7 ms as emitted here (medians of interleaved calls of the builds, one
        process, a run each).  Here each sum gets an array of partial sums, one per lane of several
        vectors (``acc_p[j] += ...`` in a simd loop over ``j``, which gcc keeps in registers),
        halved pairwise after the loop and added to the accumulator once; leftover iterations run
        the plain reduction loop.  The reduction's
        license to reassociate is the same as the clause's; the partials start at -0.0, the
        identity of IEEE addition, so a sum of -0.0s stays -0.0, and NaN and infinities propagate
        as in any order of the adds."""
        a = loop.attributes
        lb, ub, step = a["lb"], a["ub"], a["step"]
        if not (isinstance(lb, int) and isinstance(ub, int) and step == 1):
            return False
        accs = self.float_sum_accumulators(loop)
        if accs is None:
            return False
        vector = 32 // accs[0].type.dtype.itemsize    # lanes of an AVX2 vector
        lanes = SPLIT_SUM_VECTORS * vector
        while lanes > 2 * vector and ub - lb < 2 * lanes:
            lanes //= 2
        if ub - lb < 2 * lanes or any(acc.type.dtype != accs[0].type.dtype for acc in accs):
            return False
        ct, zero = C_TYPES[accs[0].type.dtype], c_literal(-0.0, accs[0].type)
        names = [self.name(acc) for acc in accs]
        parts = [self.fresh(f"{n}_p") for n in names]
        j, outer, lane = self.fresh("j"), self.fresh("i"), self.fresh("i")
        full = lb + (ub - lb) // lanes * lanes
        out = self.lines
        out += [f"{ind}{ct} {p}[{lanes}] __attribute__((aligned(64)));" for p in parts]
        # a plain loop: with ``omp simd`` on it gcc 12 kept the partials of the unrolled main loop
        # on the stack, a store and a load per add
        out.append(f"{ind}for (int {j} = 0; {j} < {lanes}; {j} += 1) {{ "
                   + " ".join(f"{p}[{j}] = {zero};" for p in parts) + " }")
        out.append(f"{ind}for (int64_t {outer} = {lb}; {outer} < {full}; {outer} += {lanes}) {{")
        out.append(f"{ind}  #pragma omp simd")
        out.append(f"{ind}  for (int64_t {lane} = 0; {lane} < {lanes}; {lane} += 1) {{")
        out.append(f"{ind}    const int64_t {v} = {outer} + {lane};")
        for acc, p in zip(accs, parts):
            self.names[id(acc)] = f"{p}[{lane}]"
        self.block(loop.regions[0].blocks[0], depth + 2)
        out.append(f"{ind}  }}")
        out.append(f"{ind}}}")
        half = lanes // 2
        while half >= 1:
            out.append(f"{ind}#pragma omp simd")
            out.append(f"{ind}for (int {j} = 0; {j} < {half}; {j} += 1) {{ "
                       + " ".join(f"{p}[{j}] += {p}[{j} + {half}];" for p in parts) + " }")
            half //= 2
        for acc, n, p in zip(accs, names, parts):
            self.names[id(acc)] = n
            out.append(f"{ind}{n} = {n} + {p}[0];")
        if full < ub:
            out.append(f"{ind}#pragma omp simd{self.reduction_clauses(loop)}")
            out.append(f"{ind}for (int64_t {v} = {full}; {v} < {ub}; {v} += 1) {{")
            self.block(loop.regions[0].blocks[0], depth + 1)
            out.append(f"{ind}}}")
        return True

    def simd_nan_flags(self, loop: Operation, ind: str) -> list[tuple[str, str]]:
        """NaN flags for the float max/min accumulators of a vectorized reduction loop: ``[(flag, acc)]``.

        OpenMP's ``reduction(max:acc)`` combines the vector lanes with the hardware max, which
        drops a NaN, so each such accumulator gets an ``int`` flag, or-reduced alongside it, that
        records a NaN operand; after the loop a raised flag makes the result NaN, as torch's and
        ONNX's max reductions are.  (-ffast-math folds the ``x != x`` tests, and the flags, away.)
        """
        flags = []
        for inner in loop.walk():
            if inner.name != "loop.store" or id(inner.operands[1]) not in self.scalars:
                continue
            comb = inner.operands[0].op
            if comb is None or comb.name not in ("scalar.max", "scalar.min") or id(comb) in self.nan_flags:
                continue
            if not inner.operands[0].type.dtype.is_float:
                continue
            flag, acc = self.fresh("nan"), self.name(inner.operands[1])
            self.lines.append(f"{ind}int {flag} = ({acc} != {acc});")
            self.nan_flags[id(comb)] = flag
            flags.append((flag, acc))
        return flags

    def index_of(self, buf: Value, idx: list[Value]) -> str:
        """The row-major offset of ``idx`` in ``buf``.  A pair of indices ``e floordiv d, e mod d``
        over dims of extent ``d`` (a reshape that split a flattened axis, as a fused
        ``reshape`` reads) contributes ``e`` itself: ``floor(e/d)*d + mod(e, d) == e`` for every
        integer ``e``, and the offset stays affine in the loop variables, so a loop over ``e`` reads
        contiguously and vectorizes (the division and remainder become dead code).  Pairs nest: the
        ``mod`` side may itself be a run of dims already joined this way (``e // 196, (e % 196) //
        14, e % 14`` over ``[C, 14, 14]`` is ``e``; left split, gcc gathered a standalone SiLU after
        an int8 conv at 0.5 ms for 0.5 MB)."""
        shape = buf.type.shape
        if not idx:
            return "0"
        expr = None
        for v, k, n in flat_runs(idx, shape):
            term = self.name(v)
            expr = term if expr is None else f"({expr}) * {' * '.join(to_c(d) for d in shape[k:k + n])} + {term}"
        return expr

    def op(self, op: Operation, depth: int) -> None:
        ind = "  " * depth
        name = op.name
        if name == "loop.for":
            a = op.attributes
            iv = op.regions[0].blocks[0].args[0]
            v = self.fresh("i")
            self.names[id(iv)] = v
            kind = a["kind"]
            if kind == "parallel" and self.parallel_depth == 0:
                red = self.reduction_clauses(op, threads=True) if a.get("reduction") else ""
                self.lines.append(f"{ind}#pragma omp parallel for schedule(static){red}")
            elif kind == "vectorize":
                if a.get("reduction") and self.split_sum(op, v, ind, depth):
                    return
                red, after = (self.reduction_clauses(op), self.simd_nan_flags(op, ind)) if a.get("reduction") else ("", [])
                red += "".join(f" reduction(|:{flag})" for flag, _ in after)
                self.lines.append(f"{ind}#pragma omp simd{red}")
            elif kind == "unroll":
                self.lines.append(f"{ind}#pragma GCC unroll {a.get('unroll') or 8}")
            self.lines.append(f"{ind}for (int64_t {v} = {a['lb']}; {v} < {to_c(a['ub'])}; {v} += {a['step']}) {{")
            par = kind == "parallel"
            self.parallel_depth += par
            self.block(op.regions[0].blocks[0], depth + 1)
            self.parallel_depth -= par
            self.lines.append(f"{ind}}}")
            if kind == "vectorize":
                self.lines += [f"{ind}if ({flag}) {acc} = NAN;" for flag, acc in after]
        elif name == "loop.if":
            self.lines.append(f"{ind}if ({self.name(op.operands[0])}) {{")
            self.block(op.regions[0].blocks[0], depth + 1)
            self.lines.append(f"{ind}}}")
        elif name == "loop.alloc":
            t = op.attributes["type"]
            v = self.fresh("t")
            self.names[id(op.results[0])] = v
            if t.rank == 0:
                self.scalars.add(id(op.results[0]))
                self.lines.append(f"{ind}{c_type(t.dtype)} {v};")
            elif not t.is_static:
                self.symbolic_alloc(t, v, ind)
            elif t.nbytes <= 64 * 1024:
                self.lines.append(f"{ind}{c_type(t)} {v}[{t.num_elements}] __attribute__((aligned(64)));")
            else:
                self.lines.append(f"{ind}{c_type(t)}* {v} = ({c_type(t)}*)aligned_alloc(64, "
                                  f"({t.nbytes} + 63) / 64 * 64);")
                self.frees.append(v)
        elif name == "loop.load":
            buf = op.operands[0]
            v = self.fresh("v")
            self.names[id(op.results[0])] = v
            ct = c_type(op.results[0].type)
            if id(buf) in self.scalars:
                self.lines.append(f"{ind}const {ct} {v} = {self.name(buf)};")
                return
            idx = op.operands[1:]
            access = f"{self.name(buf)}[{self.index_of(buf, idx)}]"
            if _is_bf16_buffer(buf.type):
                access = f"tf_bf16_load({access})"
            elif self.bool_as_bytes and isinstance(buf.type, BufferType) and buf.type.dtype is DType.bool:
                # read as bytes (the bool result converts): gcc 12 gives a loop that loads _Bool
                # next to wider elements no vector type ("no vectype"), so a masked softmax's
                # select, max and exp ran scalar (GPT-2: 6% of the model in that kernel)
                access = f"((const uint8_t *){self.name(buf)})[{self.index_of(buf, idx)}]"
            pad = op.attributes.get("pad")
            if pad is not None:
                # branch-free ``&`` on the 0/1 compares, as for the NaN-safe compares: gcc 12 at -O3
                # -march=znver1 miscompiled the vectorised ``&&`` chain of a padded read (Pad
                # read 0 for rows inside the input, fuzzer regression test_fuzz_pad_bounds_and.py)
                conds = " & ".join(f"({self.name(i)} >= 0) & ({self.name(i)} < {to_c(d)})"
                                   for i, d in zip(idx, buf.type.shape)) or "1"
                access = f"(({conds}) ? {access} : {c_literal(pad, op.results[0].type)})"
            self.lines.append(f"{ind}const {ct} {v} = {access};")
        elif name == "loop.store":
            val, buf = op.operands[0], op.operands[1]
            if id(buf) in self.scalars:
                self.lines.append(f"{ind}{self.name(buf)} = {self.name(val)};")
            else:
                value = self.name(val)
                if _is_bf16_buffer(buf.type):
                    value = f"tf_bf16_bits({value})"
                self.lines.append(f"{ind}{self.name(buf)}[{self.index_of(buf, op.operands[2:])}] = {value};")
        elif name == "loop.prefetch":
            # one prefetch per 64-byte line of the span; gcc unrolls the constant loop
            buf = op.operands[0]
            size = buf.type.dtype.itemsize
            first = f"(const char *)({self.name(buf)} + {self.name(op.operands[1])}) + {op.attributes['ahead'] * size}"
            p = self.fresh("p")
            self.lines.append(f"{ind}for (int64_t {p} = 0; {p} < {op.attributes['span'] * size}; {p} += 64) "
                              f"__builtin_prefetch({first} + {p}, 0, 3);")
        elif name == "loop.return":
            for v in self.frees:
                self.lines.append(f"{ind}free({v});")
        elif name == "scalar.const":
            self.names[id(op.results[0])] = c_literal(op.attributes["value"], op.results[0].type)
        elif name == "scalar.dim":
            self.names[id(op.results[0])] = f"({to_c(op.attributes['dim'])})"
        elif name.startswith("scalar."):
            v = self.fresh("v")
            self.names[id(op.results[0])] = v
            args = [self.name(x) for x in op.operands]
            expr = scalar_expr(op, args)
            self.lines.append(f"{ind}const {c_type(op.results[0].type)} {v} = {expr};")
            flag = self.nan_flags.get(id(op))
            if flag is not None:
                self.lines.append(f"{ind}{flag} |= " + " | ".join(f"({x} != {x})" for x in args) + ";")
        else:
            raise CompileError(f"'{name}' has no C lowering (kernel '{self.c_name}')")


    def symbolic_alloc(self, t: BufferType, v: str, ind: str) -> None:
        """A local buffer of run-time size: on the stack at its declared upper bound when that is
        small (no VLA: the frame stays bounded whatever the call's sizes), else on the heap per
        execution of the enclosing block (freed at its end, like large static buffers)."""
        from ...ir.symbolic import dim_prod
        n = dim_prod(t.shape)
        bound = self.table.upper_bound(n)
        if bound is not None and bound * t.dtype.itemsize <= STACK_BYTES:
            self.lines.append(f"{ind}{c_type(t)} {v}[{max(bound, 1)}] __attribute__((aligned(64)));")
            return
        size = f"(({to_c(n)}) * {t.dtype.itemsize} + 63) / 64 * 64"
        self.lines.append(f"{ind}{c_type(t)}* {v} = ({c_type(t)}*)aligned_alloc(64, {size} ? {size} : 64);")
        self.frees.append(v)


def _no_if_conversion(fn: Operation) -> str:
    """Functions that gcc 12's loop if-conversion miscompiles get ``TF_NO_IF_CONVERT`` (empty for
    other compilers): padded reads (see the macro), and sums that must keep -0.0: if-conversion
    turns ``acc + (c ? v : -0.0f)`` into a masked reduction that adds +0.0 for the masked lanes,
    so cumsum's accumulator (which starts from -0.0, the identity of IEEE addition) came out +0.0
    when the scan ran over the innermost axis."""
    for op in fn.walk():
        if op.name == "loop.load" and op.attributes.get("pad") is not None:
            return "TF_NO_IF_CONVERT "
        if op.name == "loop.store" and op.operands[1].type.rank == 0:
            src = op.operands[0].op
            if src is not None and src.name == "scalar.const":
                v = src.attributes.get("value")
                if isinstance(v, float) and v == 0.0 and math.copysign(1.0, v) < 0:
                    return "TF_NO_IF_CONVERT "
    return ""


def emit_function(fn: Operation, c_name: str | None = None, static: bool = True,
                  symbols: list[str] | None = None) -> str:
    return FunctionEmitter(fn, c_name, static, symbols).emit()


