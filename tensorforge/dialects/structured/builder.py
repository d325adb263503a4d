"""A small Python DSL for writing structured kernels: index and scalar expressions with operators.

    kb = KernelBuilder("matmul", [a_type, b_type])
    a, b = kb.inputs
    c = kb.compute((M, N, K), "ppr", DType.f32, lambda i, j, k: a[i, k] * b[k, j], combiner="add")
    kb.ret([c])

Integer arithmetic on index expressions folds on the fly (``i * 1 + 0`` is ``i``) so that lowered
kernels stay small; every other expression becomes a ``scalar`` op in the body being built.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ...errors import IRError
from ...ir.builder import Builder, make_op
from ...ir.core import Block, Operation, Region, Value
from ...ir.types import DType, IndexType, ScalarType, TensorType, Type
from ..scalar import INDEX, element_dtype

Number = int | float | bool


class Expr:
    """A scalar or index value under construction; Python operators build scalar ops."""

    __slots__ = ("b", "value", "const")

    def __init__(self, b: Builder, value: Value | None, const: Number | None = None):
        self.b, self.value, self.const = b, value, const

    # ---- helpers ---------------------------------------------------------------------
    @property
    def type(self) -> Type:
        return self.value.type

    @property
    def is_index(self) -> bool:
        return isinstance(self.value.type, IndexType)

    def _lift(self, other) -> "Expr":
        if isinstance(other, Expr):
            return other
        if isinstance(other, (int, float, bool)):
            return lit(self.b, other, self.type)
        if isinstance(other, str) and self.is_index:
            return dim_index(self.b, other)
        raise IRError(f"cannot combine an expression with {other!r}")

    def _bin(self, name: str, other, swap: bool = False) -> "Expr":
        o = self._lift(other)
        lhs, rhs = (o, self) if swap else (self, o)
        folded = _fold_index(name, lhs, rhs)
        if folded is not None:
            return folded
        return Expr(lhs.b, lhs.b.create(f"scalar.{name}", [lhs.value, rhs.value]).results[0])

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __floordiv__(self, o): return self._bin("floordiv", o) if self.is_index else self._bin("div", o)
    def __mod__(self, o): return self._bin("mod", o)
    def __neg__(self): return self.apply("neg")
    def __lt__(self, o): return self._bin("lt", o)
    def __le__(self, o): return self._bin("le", o)
    def __gt__(self, o): return self._bin("gt", o)
    def __ge__(self, o): return self._bin("ge", o)
    def __and__(self, o): return self._bin("and", o)
    def __or__(self, o): return self._bin("or", o)
    def eq(self, o): return self._bin("eq", o)
    def ne(self, o): return self._bin("ne", o)
    def max(self, o): return self._bin("max", o)
    def min(self, o): return self._bin("min", o)
    __hash__ = None  # expressions are not dictionary keys (== is not overloaded to build ops)

    def apply(self, name: str, *others, **attrs) -> "Expr":
        """Any scalar op by short name: ``x.apply("exp")``, ``x.apply("clip", min=0.0)``."""
        ops = [self.value] + [self._lift(o).value for o in others]
        return Expr(self.b, self.b.create(f"scalar.{name}", ops, attrs).results[0])

    def cast(self, dtype: DType) -> "Expr":
        if isinstance(self.type, ScalarType) and self.type.dtype is dtype:
            return self
        return self.apply("cast", dtype=dtype)

    def to_index(self) -> "Expr":
        """Integer data (gather indices) to an index value."""
        if self.is_index:
            return self
        return Expr(self.b, self.b.create("scalar.index_cast", [self.value]).results[0])

    def select(self, a, b) -> "Expr":
        """``self ? a : b`` (self is an i1 expression)."""
        ea = a if isinstance(a, Expr) else None
        eb = b if isinstance(b, Expr) else None
        ref = ea or eb
        if ref is None:
            raise IRError("select needs at least one expression branch")
        ea, eb = ref._lift(a), ref._lift(b)
        return Expr(self.b, self.b.create("scalar.select", [self.value, ea.value, eb.value]).results[0])


def lit(b: Builder, value: Number, type: Type) -> Expr:
    """A literal of ``type`` (an index literal remembers its value for folding)."""
    if isinstance(type, ScalarType) and type.dtype.is_float:
        value = float(value)
    elif isinstance(type, ScalarType) and type.dtype is DType.bool:
        value = bool(value)
    else:
        value = int(value)
    v = b.create("scalar.const", [], {"value": value, "type": type}).results[0]
    return Expr(b, v, value if isinstance(type, IndexType) else None)


def dim_index(b: Builder, d: int | str) -> Expr:
    """A dimension as an index value: a literal when static, else ``scalar.dim`` (read at run time),
    so index maps of symbolic shapes are written with the same operators as static ones."""
    from ...ir.symbolic import canonical
    d = canonical(d)
    if isinstance(d, int):
        return lit(b, d, INDEX)
    return Expr(b, b.create("scalar.dim", [], {"dim": d}).results[0])


def _fold_index(name: str, a: Expr, b: Expr) -> Expr | None:
    """Constant-folds index arithmetic and drops identities (x+0, x*1, x-0, x floordiv 1)."""
    if not (a.is_index and b.is_index):
        return None
    ca, cb = a.const, b.const
    if ca is not None and cb is not None:
        res = {"add": ca + cb, "sub": ca - cb, "mul": ca * cb,
               "floordiv": ca // cb if cb else None, "mod": ca % cb if cb else None,
               "max": max(ca, cb), "min": min(ca, cb)}.get(name)
        if res is not None:
            return lit(a.b, res, INDEX)
        return None
    if name in ("add", "sub") and cb == 0:
        return a
    if name == "add" and ca == 0:
        return b
    if name in ("mul", "floordiv") and cb == 1:
        return a
    if name == "mul" and ca == 1:
        return b
    if name == "mul" and (ca == 0 or cb == 0):
        return lit(a.b, 0, INDEX)
    return None


class TensorRef:
    """A tensor visible inside the kernel; ``t[i, j]`` reads it, ``t.read(idx, pad=0.0)`` bounds-checks."""

    __slots__ = ("kb", "value")

    def __init__(self, kb: "KernelBuilder", value: Value):
        self.kb, self.value = kb, value

    @property
    def type(self) -> TensorType:
        return self.value.type

    @property
    def shape(self) -> tuple:
        return self.value.type.shape

    @property
    def dtype(self) -> DType:
        return self.value.type.dtype

    def read(self, indices: Sequence, pad: float | None = None) -> Expr:
        b = self.kb.body_builder
        if b is None:
            raise IRError("tensor reads happen inside a compute body")
        idx = [i if isinstance(i, Expr) else dim_index(b, i) if isinstance(i, str) else lit(b, int(i), INDEX)
               for i in indices]
        attrs = {} if pad is None else {"pad": float(pad)}
        v = b.create("structured.read", [self.value] + [i.value for i in idx], attrs).results[0]
        return Expr(b, v)

    def __getitem__(self, idx) -> Expr:
        if not isinstance(idx, tuple):
            idx = (idx,)
        return self.read(idx)


def _domain(domain: Sequence) -> tuple:
    """Extents as dims: ints stay ints (a static kernel is unchanged), strings canonical."""
    from ...ir.symbolic import canonical
    return tuple(canonical(d) if isinstance(d, str) else int(d) for d in domain)


class KernelBuilder:
    """Builds one ``structured.kernel`` op from Python."""

    def __init__(self, name: str, input_types: Sequence[TensorType]):
        self.block = Block(list(input_types))
        self.body_builder: Builder | None = None
        self._outer = Builder.at_end(self.block)
        self.name = name
        self.inputs = [TensorRef(self, a) for a in self.block.args]
        self.op: Operation | None = None

    def const(self, value: Number, dtype: DType) -> Expr:
        if self.body_builder is None:
            raise IRError("constants are created inside a compute body")
        return lit(self.body_builder, value, ScalarType(dtype))

    def index(self, value: int) -> Expr:
        return lit(self.body_builder, value, INDEX)

    def compute(self, domain: Sequence[int], iterators: str, dtype: DType,
                body: Callable[..., Expr | Number], combiner: str = "none",
                init: float | None = None) -> TensorRef:
        region = Region([Block([INDEX] * len(domain))])
        blk = region.blocks[0]
        prev = self.body_builder
        self.body_builder = Builder.at_end(blk)
        try:
            axes = [Expr(self.body_builder, a) for a in blk.args]
            res = body(*axes)
            if not isinstance(res, Expr):
                res = lit(self.body_builder, res, ScalarType(dtype))
            res = res.cast(dtype)
            self.body_builder.create("structured.yield", [res.value])
        finally:
            self.body_builder = prev
        attrs = {"domain": _domain(domain), "iterators": iterators, "combiner": combiner, "dtype": dtype}
        if init is not None:
            attrs["init"] = init
        op = self._outer.create("structured.compute", [], attrs, regions=[region])
        return TensorRef(self, op.results[0])

    def ret(self, outputs: Sequence[TensorRef], operands: Sequence[Value]) -> Operation:
        """Closes the kernel over ``operands`` (the values feeding its inputs); returns the detached op."""
        vals = [o.value for o in outputs]
        self._outer.create("structured.return", vals)
        self.op = make_op("structured.kernel", list(operands), {"sym_name": self.name},
                          [v.type for v in vals], regions=[Region([self.block])])
        return self.op
