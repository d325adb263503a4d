"""Scalar ops -> upstream ``arith`` / ``math``, and the text writer both export levels share.

Both levels (``structured_export.py``, ``loop_export.py``) end in the same scalar bodies, so one
table here maps every ``scalar.*`` op onto upstream ops, by the kind of its operands: float,
signed or unsigned integer, bool (``i1``) or ``index``.  Upstream integers are signless, so an
unsigned tensorforge type prints as the ``iN`` of its width and its ops pick the unsigned form
(``divui``, ``cmpi ult``, ``uitofp``, ``extui``).

The semantics are the reference's (each op's ``compute`` in ``dialects/graph/elementwise.py``,
IEEE 754 as PyTorch, docs/numerics.md), and where that leaves a choice, the C backend's
(``codegen/c/emit_loop.py``): ``max``/``min`` propagate NaN (``arith.maximumf``, not
``maxnumf``), comparisons are ordered except ``!=`` (``une``, true on NaN), ``relu``/``clip``
compare and select so NaN and -0.0 pass through, integer division truncates and gives 0 for a
zero divisor (``divsi`` alone would be undefined there), ``mod`` has the divisor's sign, casts
from float to integers narrower than 32 bits go through ``i32`` as C does.  Only ops that the
stock lowering (``convert-arith-to-llvm``, ``convert-math-to-libm``/``-llvm``) handles are
emitted: ``floordivsi``, ``ceildivsi`` and ``math.ipowi`` would need extra passes, so floor
division is spelled out and an integer ``pow`` is an error.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...errors import CompileError
from ...ir.core import Operation
from ...ir.printer import bf16_bits, fix_float_literal, format_f64
from ...ir.types import BufferType, DType, IndexType, ScalarType, TensorType, Type

# Storage-only types with an upstream builtin type (bf16 computes; the float8 ones only hold data).
_ELEMENT = {d: d.value for d in DType}
_ELEMENT.update({DType.u8: "i8", DType.u16: "i16", DType.u32: "i32", DType.u64: "i64"})
# Newer than MLIR 19 or without an upstream type: no export.
_NO_UPSTREAM = {DType.f4e2m1, DType.f8e8m0, DType.i4, DType.u4, DType.i2, DType.u2}
_HEX = {DType.f16: (np.uint16, "0x%04X"), DType.f32: (np.uint32, "0x%08X"), DType.f64: (np.uint64, "0x%016X")}
STATIC_ONLY = "the MLIR export needs static shapes; give example inputs or shapes= to fix the sizes"


# ---- types and literals -------------------------------------------------------------------
def element_type(dtype: DType) -> str:
    """The upstream spelling of an element type (unsigned ints are signless ``iN``)."""
    if dtype in _NO_UPSTREAM:
        raise CompileError(f"element type {dtype} has no upstream MLIR 19 type; the MLIR export handles "
                           f"float, integer and bool tensors (cast the model to f32 first)")
    return _ELEMENT[dtype]


def static_dims(shape: Sequence, what: str) -> list[int]:
    """``shape`` as ints; a symbolic dim is a CompileError naming ``what``."""
    for d in shape:
        if not isinstance(d, int):
            raise CompileError(f"{what} has the symbolic dimension '{d}': {STATIC_ONLY}")
    return list(shape)


def mlir_type(t: Type, what: str = "a value") -> str:
    """``tensor<2x3xf32>``, ``memref<2x3xf32>``, ``f32`` or ``index`` for a tensorforge type."""
    if isinstance(t, IndexType):
        return "index"
    if isinstance(t, ScalarType):
        return element_type(t.dtype)
    if isinstance(t, (TensorType, BufferType)):
        dims = static_dims(t.shape, what)
        kind = "tensor" if isinstance(t, TensorType) else "memref"
        return f"{kind}<{''.join(f'{d}x' for d in dims)}{element_type(t.dtype)}>"
    raise CompileError(f"{what} has the type {t}, which the MLIR export does not handle")


def kind_of(t: Type) -> str:
    """'f' float, 's' signed int, 'u' unsigned int, 'b' bool, 'x' index: picks the op variant."""
    if isinstance(t, IndexType):
        return "x"
    dt = t.dtype
    if dt is DType.bool:
        return "b"
    if dt.is_float:
        return "f"
    return "u" if dt.is_unsigned else "s"


def bit_width(t: Type) -> int:
    if isinstance(t, IndexType):
        return 64
    return 1 if t.dtype is DType.bool else 8 * t.dtype.itemsize


def literal(value: Any, t: Type) -> str:
    """``value`` as an ``arith.constant`` literal of type ``t``: ``1.5 : f32``, ``3 : index``,
    ``true`` (a bool attribute is ``i1`` already; ``true : i1`` does not parse)."""
    if not isinstance(t, IndexType) and t.dtype is DType.bool:
        return element_literal(value, t)
    return f"{element_literal(value, t)} : {mlir_type(t)}"


def element_literal(value: Any, t: Type) -> str:
    """``value`` as an MLIR literal of the element type of ``t``, exactly the value the type
    holds: a float that a decimal would round twice (decimal -> double -> f32), NaN and the
    infinities print as their bit pattern, which MLIR reads as such."""
    if isinstance(t, IndexType):
        return str(int(value))
    dt = t.dtype
    if dt is DType.bool:
        return "true" if value else "false"
    if not dt.is_float:
        v, bits = int(value), 8 * dt.itemsize
        return str(v - (1 << bits) if dt.is_unsigned and v >= 1 << (bits - 1) else v)   # signless bits
    if dt is DType.f64:
        return format_f64(float(value))
    if dt is DType.bf16:
        return "0x%04X" % int(bf16_bits(np.asarray([value], np.float32))[0])
    if dt.is_storage_only:
        raise CompileError(f"a {dt} constant has no upstream MLIR export; cast the model to f32 first")
    x = dt.np.type(value)
    if np.isfinite(x):
        s = fix_float_literal(str(x))
        if dt.np.type(float(s)) == x and math.copysign(1.0, float(s)) == math.copysign(1.0, float(x)):
            return s
    bits_t, fmt = _HEX[dt]
    return fmt % int(np.asarray(x).view(bits_t))


# ---- the writer ---------------------------------------------------------------------------
class Emitter:
    """Writes one function body: fresh SSA names, indented lines, and an entry block part.

    Constants and hoisted allocations go to ``entry`` (printed first in the function body), so
    one constant serves every region of the function; the regions of ``linalg.generic``,
    ``scf.for`` and ``scf.if`` are not isolated from above, so their bodies may use them.
    """

    __slots__ = ("lines", "entry", "depth", "_count", "_consts")

    def __init__(self, depth: int = 2):
        self.lines: list[str] = []
        self.entry: list[str] = []
        self.depth = depth
        self._count = 0
        self._consts: dict[str, str] = {}

    def fresh(self, prefix: str = "") -> str:
        self._count += 1
        return f"%{prefix}{self._count - 1}"

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def op(self, text: str) -> str:
        """Writes ``%N = text`` and returns ``%N``."""
        name = self.fresh()
        self.line(f"{name} = {text}")
        return name

    def at_entry(self, text: str, prefix: str = "") -> str:
        """Writes ``%N = text`` at the function's entry (before every other line)."""
        name = self.fresh(prefix)
        self.entry.append(f"{'  ' * 2}{name} = {text}")
        return name

    def const(self, value: Any, t: Type) -> str:
        """An ``arith.constant`` of ``value`` in type ``t``, one per distinct literal."""
        lit = literal(value, t)
        name = self._consts.get(lit)
        if name is None:
            name = self._consts[lit] = self.at_entry(f"arith.constant {lit}", "c")
        return name

    def body_text(self) -> str:
        return "\n".join(self.entry + self.lines)


# ---- scalar ops ---------------------------------------------------------------------------
class _Ctx:
    """One scalar op being written: its operand names and types, result type and attributes."""

    __slots__ = ("em", "name", "args", "types", "result", "attrs", "kind", "ty", "const_of")

    def __init__(self, em: Emitter, name: str, args: Sequence[str], types: Sequence[Type], result: Type,
                 attrs: Mapping[str, Any], const_of: Mapping[str, Any]):
        self.em, self.name, self.args, self.types, self.result = em, name, list(args), list(types), result
        self.attrs, self.const_of = attrs, const_of
        self.kind = kind_of(types[0]) if types else kind_of(result)
        self.ty = mlir_type(types[0]) if types else mlir_type(result)

    # arith/math helpers on the operand type
    def bin(self, op: str, a: str, b: str, ty: str | None = None) -> str:
        return self.em.op(f"{op} {a}, {b} : {ty or self.ty}")

    def un(self, op: str, a: str, ty: str | None = None) -> str:
        return self.em.op(f"{op} {a} : {ty or self.ty}")

    def cmp(self, pred: str, a: str, b: str, kind: str | None = None, ty: str | None = None) -> str:
        kind = kind or self.kind
        if kind == "f":
            fp = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}[pred]
            return self.em.op(f"arith.cmpf {fp}, {a}, {b} : {ty or self.ty}")
        sign = "u" if kind in ("u", "b") else "s"
        ip = pred if pred in ("eq", "ne") else sign + pred
        return self.em.op(f"arith.cmpi {ip}, {a}, {b} : {ty or self.ty}")

    def select(self, c: str, a: str, b: str, ty: str | None = None) -> str:
        return self.em.op(f"arith.select {c}, {a}, {b} : {ty or self.ty}")

    def c(self, value: Any, t: Type | None = None) -> str:
        return self.em.const(value, t if t is not None else self.types[0])

    def fail(self, why: str) -> CompileError:
        dt = self.types[0] if self.types else self.result
        return CompileError(f"'{self.name}' on {dt} {why}")

    def float_only(self) -> None:
        if self.kind != "f":
            raise self.fail("has no upstream MLIR export (a float op); cast to f32 first")

    def nonzero_const(self, v: str) -> bool:
        c = self.const_of.get(v)
        return c is not None and c != 0


def _arith(fop: str, iop: str, bop: str | None = None) -> Callable[[_Ctx], str]:
    def emit(x: _Ctx) -> str:
        op = fop if x.kind == "f" else bop if (x.kind == "b" and bop) else iop
        return x.bin(op, *x.args)
    return emit


def _guarded_divisor(x: _Ctx, b: str) -> tuple[str, str | None]:
    """(a divisor safe to divide by, the i1 'divisor was zero' or None when it cannot be)."""
    if x.nonzero_const(b):
        return b, None
    zero = x.cmp("eq", b, x.c(0))
    return x.select(zero, x.c(1), b), zero


def _div(x: _Ctx) -> str:
    a, b = x.args
    if x.kind == "f":
        return x.bin("arith.divf", a, b)
    if x.kind == "b":
        return a                                      # a / true == a; / false: 0 (guarded below)
    safe, zero = _guarded_divisor(x, b)
    q = x.bin("arith.divui" if x.kind == "u" else "arith.divsi", a, safe)
    return q if zero is None else x.select(zero, x.c(0), q)


def _int_floor_fixup(x: _Ctx, a: str, b: str, safe: str) -> tuple[str, str]:
    """(truncated quotient, 'remainder is nonzero and of the other sign than b') for a // b."""
    q = x.bin("arith.divsi", a, safe)
    r = x.bin("arith.remsi", a, safe)
    zero = x.c(0)
    off = x.bin("arith.andi", x.cmp("ne", r, zero), x.bin("arith.xori", x.cmp("lt", r, zero), x.cmp("lt", b, zero),
                                                          "i1"), "i1")
    return q, off


def _floordiv(x: _Ctx) -> str:
    a, b = x.args
    safe, zero = _guarded_divisor(x, b)
    if x.kind == "u":
        q = x.bin("arith.divui", a, safe)
    else:
        q, off = _int_floor_fixup(x, a, b, safe)
        q = x.select(off, x.bin("arith.subi", q, x.c(1)), q)
    return q if zero is None else x.select(zero, x.c(0), q)


def _mod(x: _Ctx) -> str:
    """Remainder with the divisor's sign (NumPy ``mod``; a zero result takes the divisor's sign
    for floats, 0 for a zero integer divisor)."""
    a, b = x.args
    if x.kind == "f":
        r = x.bin("arith.remf", a, b)
        zero = x.c(0.0)
        off = x.bin("arith.andi", x.cmp("ne", r, zero),
                    x.bin("arith.xori", x.cmp("lt", r, zero), x.cmp("lt", b, zero), "i1"), "i1")
        fixed = x.select(off, x.bin("arith.addf", r, b), r)
        signed_zero = x.select(x.cmp("lt", b, zero), x.c(-0.0), zero)    # (math.copysign has no lowering)
        return x.select(x.cmp("eq", r, zero), signed_zero, fixed)
    if x.kind == "b":
        return x.c(False, x.types[0])
    safe, zero = _guarded_divisor(x, b)
    if x.kind == "u":
        r = x.bin("arith.remui", a, safe)
    else:
        r = x.bin("arith.remsi", a, safe)
        c0 = x.c(0)
        off = x.bin("arith.andi", x.cmp("ne", r, c0), x.bin("arith.xori", x.cmp("lt", r, c0), x.cmp("lt", b, c0),
                                                           "i1"), "i1")
        r = x.select(off, x.bin("arith.addi", r, b), r)
    return r if zero is None else x.select(zero, x.c(0), r)


def _fmod(x: _Ctx) -> str:
    a, b = x.args
    if x.kind == "f":
        return x.bin("arith.remf", a, b)
    if x.kind == "b":
        return x.c(False, x.types[0])
    safe, zero = _guarded_divisor(x, b)
    r = x.bin("arith.remui" if x.kind == "u" else "arith.remsi", a, safe)
    return r if zero is None else x.select(zero, x.c(0), r)


def _pow(x: _Ctx) -> str:
    if x.kind != "f":
        raise x.fail("has no upstream MLIR export (integer pow needs math.ipowi, which the stock "
                     "lowering lacks); compute it in f32")
    return x.bin("math.powf", *x.args)


def _minmax(which: str) -> Callable[[_Ctx], str]:
    def emit(x: _Ctx) -> str:
        suffix = {"f": "imumf", "s": "si", "x": "si"}.get(x.kind, "ui")      # bool and unsigned: ui
        op = f"arith.{which}{suffix}"
        return x.bin(op, *x.args)
    return emit


def _as_bool(x: _Ctx, v: str, t: Type) -> str:
    if kind_of(t) == "b":
        return v
    return x.cmp("ne", v, x.em.const(0.0 if kind_of(t) == "f" else 0, t), kind_of(t), mlir_type(t))


def _logical(op: str) -> Callable[[_Ctx], str]:
    def emit(x: _Ctx) -> str:
        a, b = (_as_bool(x, v, t) for v, t in zip(x.args, x.types))
        return x.bin(op, a, b, "i1")
    return emit


def _not(x: _Ctx) -> str:
    a = _as_bool(x, x.args[0], x.types[0])
    return x.bin("arith.xori", a, x.em.const(True, ScalarType(DType.bool)), "i1")


def _bitwise_not(x: _Ctx) -> str:
    if x.kind == "f":
        raise x.fail("has no bitwise form")
    ones = x.c(True) if x.kind == "b" else x.em.op(f"arith.constant -1 : {x.ty}")
    return x.bin("arith.xori", x.args[0], ones)


def _compare(pred: str) -> Callable[[_Ctx], str]:
    return lambda x: x.cmp(pred, *x.args)


def _neg(x: _Ctx) -> str:
    if x.kind == "f":
        return x.un("arith.negf", x.args[0])
    if x.kind == "b":
        return x.args[0]
    return x.bin("arith.subi", x.c(0), x.args[0])


def _abs(x: _Ctx) -> str:
    if x.kind == "f":
        return x.un("math.absf", x.args[0])
    if x.kind in ("s", "x"):              # compare and select: math.absi has no stock lowering
        a = x.args[0]
        zero = x.c(0)
        return x.select(x.cmp("lt", a, zero), x.bin("arith.subi", zero, a), a)
    return x.args[0]


def _math(op: str) -> Callable[[_Ctx], str]:
    def emit(x: _Ctx) -> str:
        x.float_only()
        return x.un(op, x.args[0])
    return emit


def _one_over(x: _Ctx, v: str) -> str:
    return x.bin("arith.divf", x.c(1.0), v)


def _exp_neg_plus_one(x: _Ctx, a: str) -> str:
    """``1 + exp(-a)``, the denominator of sigmoid and SiLU."""
    return x.bin("arith.addf", x.c(1.0), x.un("math.exp", x.un("arith.negf", a)))


def _sigmoid(x: _Ctx) -> str:
    x.float_only()
    return _one_over(x, _exp_neg_plus_one(x, x.args[0]))


def _silu(x: _Ctx) -> str:
    x.float_only()
    return x.bin("arith.divf", x.args[0], _exp_neg_plus_one(x, x.args[0]))


def _softplus(x: _Ctx) -> str:
    x.float_only()
    a = x.args[0]
    soft = x.un("math.log1p", x.un("math.exp", a))
    return x.select(x.cmp("gt", a, x.c(20.0)), a, soft)


def _relu(x: _Ctx) -> str:
    """``a < 0 ? 0 : a``: NaN and -0.0 pass through, as torch.relu."""
    if x.kind in ("u", "b"):
        return x.args[0]
    a = x.args[0]
    zero = x.c(0.0 if x.kind == "f" else 0)
    return x.select(x.cmp("lt", a, zero), zero, a)


def _sign(x: _Ctx) -> str:
    a = x.args[0]
    zero = x.c(0.0 if x.kind == "f" else 0)
    pos = x.select(x.cmp("gt", a, zero), x.c(1), zero)
    if x.kind in ("u", "b"):
        return pos
    out = x.select(x.cmp("lt", a, zero), x.c(-1), pos)
    if x.kind == "f":          # NaN stays NaN (NumPy/ONNX)
        out = x.select(x.em.op(f"arith.cmpf uno, {a}, {a} : {x.ty}"), a, out)
    return out


def _select(x: _Ctx) -> str:
    c, a, b = x.args
    return x.select(_as_bool(x, c, x.types[0]), a, b, mlir_type(x.types[1]))


def _gelu(x: _Ctx) -> str:
    x.float_only()
    a = x.args[0]
    if x.attrs.get("approximate", "none") == "tanh":
        cube = x.bin("arith.mulf", x.bin("arith.mulf", a, a), a)
        inner = x.bin("arith.addf", a, x.bin("arith.mulf", x.c(0.044715), cube))
        t = x.un("math.tanh", x.bin("arith.mulf", x.c(0.7978845608028654), inner))
    else:
        t = x.un("math.erf", x.bin("arith.mulf", a, x.c(0.7071067811865476)))
    return x.bin("arith.mulf", x.bin("arith.mulf", x.c(0.5), a), x.bin("arith.addf", x.c(1.0), t))


def _leaky_relu(x: _Ctx) -> str:
    x.float_only()
    a = x.args[0]
    return x.select(x.cmp("ge", a, x.c(0.0)), a, x.bin("arith.mulf", a, x.c(x.attrs.get("alpha", 0.01))))


def _elu(x: _Ctx) -> str:
    """PyTorch's ELU: ``alpha * expm1(a)`` below 0 (keeps -0.0 and tiny values)."""
    x.float_only()
    a = x.args[0]
    neg = x.bin("arith.mulf", x.c(x.attrs.get("alpha", 1.0)), x.un("math.expm1", a))
    return x.select(x.cmp("ge", a, x.c(0.0)), a, neg)


def _clamp(x: _Ctx, a: str, lo: Any, hi: Any) -> str:
    """Compare and select (a value equal to a bound stays itself, NaN passes), as torch.clamp."""
    if lo is not None:
        c = x.c(lo)
        a = x.select(x.cmp("lt", a, c), c, a)
    if hi is not None:
        c = x.c(hi)
        a = x.select(x.cmp("gt", a, c), c, a)
    return a


def _clip(x: _Ctx) -> str:
    lo, hi = x.attrs.get("min"), x.attrs.get("max")
    if x.kind != "f":              # integer bounds: the nearest integers inside the type's range;
        tmin, tmax = (0, 1) if x.kind == "b" else (x.types[0].dtype.int_range if x.kind != "x" else (-2**63, 2**63 - 1))
        lo = math.ceil(lo) if lo is not None and math.isfinite(lo) and lo > tmin else None   # none if no-op
        hi = math.floor(hi) if hi is not None and math.isfinite(hi) and hi < tmax else None
        lo, hi = (None if v is None else min(max(v, tmin), tmax) for v in (lo, hi))
    return _clamp(x, x.args[0], lo, hi)


def _hard_sigmoid(x: _Ctx) -> str:
    x.float_only()
    scaled = x.bin("arith.mulf", x.args[0], x.c(x.attrs.get("alpha", 0.2)))
    a = x.bin("arith.addf", scaled, x.c(x.attrs.get("beta", 0.5)))
    return _clamp(x, a, 0.0, 1.0)


def cast_value(em: Emitter, v: str, src: Type, dst: Type, what: str = "scalar.cast") -> str:
    """``v`` of type ``src`` converted to ``dst`` as the reference's cast does (float to int
    truncates toward zero, to bool is ``!= 0`` so NaN gives true)."""
    if src == dst:
        return v
    sk, dk = kind_of(src), kind_of(dst)
    for t in (src, dst):
        if isinstance(t, ScalarType) and t.dtype.is_storage_only and t.dtype is not DType.bf16:
            raise CompileError(f"'{what}' to or from {t.dtype} has no upstream MLIR export (its rounding is "
                               f"tensorforge's own); cast the model to f32 first")
    st, dt_ = mlir_type(src), mlir_type(dst)
    if sk == "x":                                  # index: through i64
        if dk == "x":
            return v
        v = em.op(f"arith.index_cast {v} : index to i64")
        return cast_value(em, v, ScalarType(DType.i64), dst, what)
    if dk == "x":
        op = "arith.index_castui" if sk in ("u", "b") else "arith.index_cast"
        if sk == "f":
            v = cast_value(em, v, src, ScalarType(DType.i64), what)
            st, op = "i64", "arith.index_cast"
        return em.op(f"{op} {v} : {st} to index")
    if dk == "b":
        zero = em.const(0.0 if sk == "f" else 0, src)
        cmp = "arith.cmpf une" if sk == "f" else "arith.cmpi ne"
        return em.op(f"{cmp}, {v}, {zero} : {st}")
    sw, dw = bit_width(src), bit_width(dst)
    if sk == "f" and dk == "f":
        if sw == dw:                               # f16 <-> bf16: through f32
            mid = em.op(f"arith.extf {v} : {st} to f32")
            return em.op(f"arith.truncf {mid} : f32 to {dt_}")
        return em.op(f"arith.{'extf' if dw > sw else 'truncf'} {v} : {st} to {dt_}")
    if dk == "f":                                  # integer -> float
        return em.op(f"arith.{'uitofp' if sk in ('u', 'b') else 'sitofp'} {v} : {st} to {dt_}")
    if sk == "f":                                  # float -> integer, truncating
        if dw < 32:                                # as C's ((int8_t)(int32_t)x)
            wide = em.op(f"arith.fptosi {v} : {st} to i32")
            return em.op(f"arith.trunci {wide} : i32 to {dt_}")
        return em.op(f"arith.{'fptoui' if dk == 'u' else 'fptosi'} {v} : {st} to {dt_}")
    if dw == sw:                                   # signedness only: the same signless bits
        return v
    if dw < sw:
        return em.op(f"arith.trunci {v} : {st} to {dt_}")
    return em.op(f"arith.{'extui' if sk in ('u', 'b') else 'extsi'} {v} : {st} to {dt_}")


def _cast(x: _Ctx) -> str:
    if x.attrs.get("via") is not None:
        raise CompileError(f"'{x.name}' rounds through {x.attrs['via']}, which has no upstream MLIR export; "
                           f"cast the model to f32 first")
    return cast_value(x.em, x.args[0], x.types[0], x.result, x.name)


def _index_cast(x: _Ctx) -> str:
    return cast_value(x.em, x.args[0], x.types[0], x.result, x.name)


def _bitcast(x: _Ctx) -> str:
    src, dst = x.types[0], x.result
    if kind_of(dst) == "b":
        return _as_bool(x, x.args[0], src)
    if kind_of(src) == "b":
        return x.em.op(f"arith.extui {x.args[0]} : i1 to {mlir_type(dst)}")
    if mlir_type(src) == mlir_type(dst):
        return x.args[0]
    return x.em.op(f"arith.bitcast {x.args[0]} : {x.ty} to {mlir_type(dst)}")


def _dim(x: _Ctx) -> str:
    raise CompileError(f"'scalar.dim' reads the symbolic dimension '{x.attrs.get('dim')}': {STATIC_ONLY}")


SCALAR_OPS: dict[str, Callable[[_Ctx], str]] = {
    "add": _arith("arith.addf", "arith.addi", "arith.ori"),
    "sub": _arith("arith.subf", "arith.subi", "arith.xori"),
    "mul": _arith("arith.mulf", "arith.muli", "arith.andi"),
    "div": _div, "floordiv": _floordiv, "mod": _mod, "fmod": _fmod, "pow": _pow,
    "max": _minmax("max"), "min": _minmax("min"),
    "and": _logical("arith.andi"), "or": _logical("arith.ori"), "xor": _logical("arith.xori"), "not": _not,
    "bitwise_and": _arith("arith.andi", "arith.andi"), "bitwise_or": _arith("arith.ori", "arith.ori"),
    "bitwise_xor": _arith("arith.xori", "arith.xori"), "bitwise_not": _bitwise_not,
    "eq": _compare("eq"), "ne": _compare("ne"), "lt": _compare("lt"), "le": _compare("le"),
    "gt": _compare("gt"), "ge": _compare("ge"),
    "neg": _neg, "abs": _abs,
    "exp": _math("math.exp"), "log": _math("math.log"), "sqrt": _math("math.sqrt"), "tanh": _math("math.tanh"),
    "erf": _math("math.erf"), "sin": _math("math.sin"), "cos": _math("math.cos"), "asin": _math("math.asin"),
    "acos": _math("math.acos"), "atan": _math("math.atan"), "floor": _math("math.floor"),
    "ceil": _math("math.ceil"), "round": _math("math.roundeven"),
    "rsqrt": lambda x: (x.float_only(), _one_over(x, x.un("math.sqrt", x.args[0])))[1],
    "reciprocal": lambda x: (x.float_only(), _one_over(x, x.args[0]))[1],
    "sigmoid": _sigmoid, "silu": _silu, "softplus": _softplus, "relu": _relu, "sign": _sign,
    "identity": lambda x: x.args[0], "select": _select,
    "gelu": _gelu, "leaky_relu": _leaky_relu, "elu": _elu, "hard_sigmoid": _hard_sigmoid, "clip": _clip,
    "cast": _cast, "index_cast": _index_cast, "bitcast": _bitcast, "dim": _dim,
}
# Bitwise ops on floats have no meaning; and/or/xor of integers are bitwise in arith anyway.
_INT_ONLY = {"bitwise_and", "bitwise_or", "bitwise_xor"}


def scalar_value(em: Emitter, name: str, args: Sequence[str], types: Sequence[Type], result: Type,
                 attrs: Mapping[str, Any] | None = None, const_of: Mapping[str, Any] | None = None) -> str:
    """Writes scalar op ``name`` (``scalar.add`` or ``add``) on the SSA names ``args`` of
    ``types``; returns the name of its ``result``-typed value.  ``const_of`` maps names that hold
    constants to their values (an integer division by a nonzero constant needs no zero guard)."""
    short = name.split(".", 1)[1] if name.startswith("scalar.") else name
    full = f"scalar.{short}"
    fn = SCALAR_OPS.get(short)
    if fn is None:
        raise CompileError(f"'{full}' has no upstream MLIR (arith/math) mapping yet; add one in "
                           f"tensorforge/codegen/mlir/scalar.py")
    if short in _INT_ONLY and types and kind_of(types[0]) == "f":
        raise CompileError(f"'{full}' on {types[0]} has no upstream MLIR export (bitwise on floats)")
    ctx = _Ctx(em, full, args, types, result, attrs or {}, const_of or {})
    if short not in ("cast", "index_cast", "bitcast", "select", "dim") and len(set(map(str, types))) > 1:
        raise CompileError(f"'{full}' mixes operand types {', '.join(map(str, types))}; the MLIR export "
                           f"needs them equal (insert a cast)")
    return fn(ctx)


def scalar_op(em: Emitter, op: Operation, args: Sequence[str], const_of: Mapping[str, Any] | None = None) -> str:
    """Writes one ``scalar.*`` op (not ``scalar.const``) of the IR; returns its result's name."""
    return scalar_value(em, op.name, args, [v.type for v in op.operands], op.results[0].type, op.attributes,
                        const_of)


def element_read(em: Emitter, op: Operation, src: str, indices: Sequence[str], read_op: str) -> str:
    """``op`` (a ``structured.read`` or ``loop.load`` of ``src`` at ``indices``) as ``read_op``
    (``tensor.extract`` / ``memref.load``), through ``guarded_read`` when it has a ``pad``."""
    source = op.operands[0]
    ty = mlir_type(source.type)

    def read(ix: list[str]) -> str:
        return em.op(f"{read_op} {src}[{', '.join(ix)}] : {ty}")

    pad = op.attributes.get("pad")
    if pad is None:
        return read(list(indices))
    return guarded_read(em, indices, source.type.shape, pad, op.results[0].type, read)


def guarded_read(em: Emitter, indices: Sequence[str], shape: Sequence[int], pad: float, t: Type,
                 read: Callable[[list[str]], str]) -> str:
    """An element read whose out-of-range indices give ``pad`` (a padded convolution window):
    each index is clamped into range so the read itself is always in bounds, and a select picks
    ``pad`` when any index was outside (branch-free, so loops stay vectorisable)."""
    if any(d == 0 for d in shape):
        return em.const(_pad_value(pad, t), t)
    zero = em.const(0, IndexType())
    inside, clamped = None, []
    for i, d in zip(indices, shape):
        top = em.const(d - 1, IndexType())
        ok = em.op(f"arith.andi {em.op(f'arith.cmpi sge, {i}, {zero} : index')}, "
                   f"{em.op(f'arith.cmpi sle, {i}, {top} : index')} : i1")
        inside = ok if inside is None else em.op(f"arith.andi {inside}, {ok} : i1")
        clamped.append(em.op(f"arith.maxsi {em.op(f'arith.minsi {i}, {top} : index')}, {zero} : index"))
    value = read(clamped)
    if inside is None:
        return value
    return em.op(f"arith.select {inside}, {value}, {em.const(_pad_value(pad, t), t)} : {mlir_type(t)}")


def _pad_value(pad: float, t: Type) -> Any:
    k = kind_of(t)
    if k == "f":
        return float(pad)
    if k == "b":
        return bool(pad)
    return int(pad) if math.isfinite(pad) else (t.dtype.int_range[0] if pad < 0 else t.dtype.int_range[1])


__all__ = ["Emitter", "SCALAR_OPS", "STATIC_ONLY", "cast_value", "element_type", "element_literal", "element_read", "guarded_read",
           "kind_of", "literal", "mlir_type", "scalar_op", "scalar_value", "static_dims"]
