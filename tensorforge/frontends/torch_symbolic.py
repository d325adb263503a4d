"""Symbolic shapes for the PyTorch frontend: torch's SymInts as tensorforge dims.

``torch.export(..., dynamic_shapes=...)`` and ``torch.compile(..., dynamic=True)`` trace a model
once for a range of sizes; every size in the traced graph is then a sympy expression over
symbols (``s77``, ``2*s77``, ``FloorDiv(s27, 2) + 1``) recorded in the fake tensors of
``node.meta["val"]``.  This module turns those into the canonical dim strings of
``tensorforge.ir.symbolic`` (built from the sympy tree, never from its text, so that the
canonical form does not depend on how sympy prints), names the symbols after the user's
``torch.export.Dim`` names where torch kept them (errors then say ``batch``, not ``s77``), and
records each symbol's range and the example input's size (the hint) in the function's symbol
table.

``FxImporter`` (``frontends/torch.py``) calls into a ``SymbolicShapes`` only when it has one:
static models import exactly as before.  The hooks are

* ``shape(val)``: a fake tensor's shape as dims (``FxImporter.meta_type``);
* ``is_scalar_node`` / ``scalar_value``: nodes whose value is a size (``aten.sym_size.int``,
  ``operator.mul`` on SymInts, Dynamo's SymInt placeholders) are not computed at all: their
  traced expression *is* their value, a dim that size arguments (view, expand, slice) take;
* ``handler(name)``: ATen handlers that compute with sizes and need a symbolic version
  (slice with a symbolic end, arange of a symbolic length, full of a symbolic shape, ...);
* ``dim_tensor``: a dim used as a tensor *value* (``x * x.shape[0]``, ``var``'s count) becomes a
  small i64 computation over ``graph.shape_of`` of the input that binds each symbol.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..errors import FrontendError, UnsupportedOpError
from ..ir.core import Value
from ..ir.symbolic import (Dim, Expr, SymbolRange, SymbolTable, as_dim, as_expr, dim_max, dim_min,
                           set_symbol_table, symbols_of)
from ..ir.types import DType

__all__ = ["SymbolicShapes", "sympy_to_expr", "import_torch_dynamic", "symint_placeholders",
           "is_symbolic_graph"]

_RESERVED = {"min", "max"}          # would parse as functions in dim text


# ---- sympy -> Expr -------------------------------------------------------------------------

def sympy_to_expr(e: Any, name_of: Callable[[Any], str]) -> Expr:
    """The dim expression of a sympy integer expression; ``name_of(symbol)`` names its symbols.

    Covers what size arithmetic produces: sums, products, natural powers, floor division
    (``FloorDiv``, ``CleanDiv``, ``CeilDiv``, ``FloorToInt(IntTrueDiv)``), modulo (``Mod``,
    ``PythonMod``, ``ModularIndexing``), ``Max``/``Min``.  Anything else (a float, ``Where``, a
    shift) raises ``UnsupportedOpError`` naming the function.
    """
    import sympy

    conv = _SympyConverter(name_of)
    return conv(sympy.sympify(e))


class _SympyConverter:
    """Recursive sympy -> Expr translation with one rule per sympy function class."""

    def __init__(self, name_of: Callable[[Any], str]):
        self.name_of = name_of

    def __call__(self, e) -> Expr:
        import sympy
        import torch.utils._sympy.functions as tf

        if isinstance(e, (int, sympy.Integer)) or (e.is_Number and e.is_integer):
            return Expr.const(int(e))
        if isinstance(e, sympy.Symbol):
            return Expr.symbol(self.name_of(e))
        if isinstance(e, sympy.Add):
            out = Expr.const(0)
            for a in e.args:
                out = out + self(a)
            return out
        if isinstance(e, sympy.Mul):
            out = Expr.const(1)
            for a in e.args:
                out = out * self(a)
            return out
        if isinstance(e, (sympy.Pow, tf.PowByNatural)):
            base, exp = e.args
            if not (exp.is_Integer and int(exp) >= 0):
                raise self.unsupported(e, "a power with a non-natural exponent")
            out = Expr.const(1)
            for _ in range(int(exp)):
                out = out * self(base)
            return out
        if isinstance(e, (tf.FloorDiv, tf.CleanDiv)):
            return self.div(e, *e.args)
        if isinstance(e, tf.CeilDiv):
            a, b = (self(x) for x in e.args)
            return self.div(e, a + b - 1, b, converted=True)
        if isinstance(e, (tf.FloorToInt, tf.TruncToInt, tf.CeilToInt)) and isinstance(e.args[0], tf.IntTrueDiv):
            a, b = (self(x) for x in e.args[0].args)
            if isinstance(e, tf.CeilToInt):
                a = a + b - 1
            return self.div(e, a, b, converted=True)
        if isinstance(e, (tf.Mod, tf.PythonMod, sympy.Mod)):
            a, b = (self(x) for x in e.args)
            return self.guard(e, lambda: a % b)
        if isinstance(e, tf.ModularIndexing):
            base, div, mod = (self(x) for x in e.args)
            return self.guard(e, lambda: (base // div) % mod)
        if isinstance(e, (sympy.Max, sympy.Min)) or type(e).__name__ in ("Max", "Min"):
            pick = dim_max if type(e).__name__ == "Max" else dim_min
            out = as_dim(self(e.args[0]))
            for a in e.args[1:]:
                out = pick(out, as_dim(self(a)))
            return as_expr(out)
        if isinstance(e, tf.Identity):
            return self(e.args[0])
        raise self.unsupported(e, f"the size function {type(e).__name__}")

    def div(self, e, a, b, converted: bool = False) -> Expr:
        if not converted:
            a, b = self(a), self(b)
        return self.guard(e, lambda: a // b)

    def guard(self, e, fn: Callable[[], Expr]) -> Expr:
        from ..errors import ShapeError
        try:
            return fn()
        except ShapeError as err:
            raise self.unsupported(e, str(err)) from None

    @staticmethod
    def unsupported(e, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"symbolic size {e}: {what} has no tensorforge dim (dims are "
                                  f"polynomials with floordiv/mod by constants, min and max)")


# ---- symbols of one traced graph -------------------------------------------------------------

class SymbolicShapes:
    """The symbols of one traced graph: their tensorforge names, ranges and hints.

    ``ranges`` maps each sympy symbol to ``(lo, hi)`` (hi None when unbounded); ``hints`` to the
    example's size; ``names`` to the user's name for it (a ``torch.export.Dim`` name), where
    known.  Symbols with no user name keep torch's (``s0``, ``s77``).
    """

    def __init__(self, ranges: Mapping[Any, tuple[int, int | None]], hints: Mapping[Any, int],
                 names: Mapping[Any, str] | None = None):
        self.ranges = dict(ranges)
        self.hints = dict(hints)
        self._names: dict[Any, str] = {}
        self._taken: set[str] = set()
        for sym, name in (names or {}).items():
            self._assign(sym, name)
        self._dim_values: dict[tuple, Value] = {}
        self._binders: dict[str, tuple[Value, int]] | None = None
        self._alias: dict[Any, Any] = {}        # symbol -> the symbol it provably equals

    # -- construction --------------------------------------------------------------------
    @staticmethod
    def from_exported_program(ep) -> "SymbolicShapes":
        """Ranges from ``ep.range_constraints`` (what export proved, user min/max included);
        names and hints from the shape environment of the user inputs' fake tensors."""
        ranges = {sym: _value_range(vr) for sym, vr in ep.range_constraints.items()}
        env = _shape_env(_placeholder_values(ep.graph_module.graph))
        out = SymbolicShapes(ranges, _hints(env, ranges), _debug_names(env, ranges))
        out.unify_implied(ep.graph_module.graph)
        return out

    @staticmethod
    def from_fx_graph(graph) -> "SymbolicShapes":
        """Ranges, hints and names from the shape environment of a graph that AOT autograd (for
        Dynamo) traced with SymInt inputs."""
        env = _shape_env(_placeholder_values(graph))
        if env is None:
            return SymbolicShapes({}, {})
        ranges = {sym: _value_range(vr) for sym, vr in env.var_to_range.items()}
        out = SymbolicShapes(ranges, _hints(env, ranges), _debug_names(env, ranges))
        out.unify_implied(graph)
        return out

    def unify_implied(self, graph) -> None:
        """Makes symbols one where an op needs two sizes equal but tracing did not prove it.

        torch's attention does not check that keys and values have the same length, so a KV
        cache passed as separate key and value tensors traces with two symbols (``s53 + 1`` and
        ``s40 + 1``); one compiled kernel needs one length, so the second symbol becomes the
        first, and the runtime's entry check then requires the inputs to agree."""
        for node in graph.nodes:
            if node.op == "call_function" and "scaled_dot_product" in str(node.target) and len(node.args) >= 3:
                k, v = (a.meta.get("val") for a in node.args[1:3])
                if k is not None and v is not None and k.dim() >= 2 and v.dim() >= 2:
                    self._unify(k.shape[-2], v.shape[-2])

    def _unify(self, a, b) -> None:
        """Aliases one symbol to another when ``a - b`` is exactly the difference of two symbols."""
        import sympy

        ea, eb = (self._resolve(getattr(getattr(x, "node", None), "expr", x)) for x in (a, b))
        diff = sympy.expand(sympy.sympify(ea) - sympy.sympify(eb))
        syms = sorted(diff.free_symbols, key=str)
        if len(syms) != 2 or not diff.is_Add or len(diff.args) != 2:
            return
        plus = [t for t in diff.args if t in syms]
        minus = [-t for t in diff.args if -t in syms]
        if len(plus) != 1 or len(minus) != 1:
            return
        keep, drop = sorted((plus[0], minus[0]), key=lambda s: (s not in self._names, str(s)))
        self._alias[drop] = keep
        lo1, hi1 = self.ranges.get(keep, (0, None))
        lo2, hi2 = self.ranges.get(drop, (0, None))
        his = [h for h in (hi1, hi2) if h is not None]
        self.ranges[keep] = (max(lo1, lo2), min(his) if his else None)

    def _resolve(self, expr):
        """``expr`` with aliased symbols replaced by the symbol they equal."""
        if not self._alias or not hasattr(expr, "xreplace"):
            return expr
        return expr.xreplace(self._alias)

    def _assign(self, sym, name: str) -> str:
        base = name if name.isidentifier() and name not in _RESERVED else f"s_{_ident(name)}"
        out, k = base, 1
        while out in self._taken:
            k += 1
            out = f"{base}_{k}"
        self._taken.add(out)
        self._names[sym] = out
        return out

    # -- naming and conversion -----------------------------------------------------------
    def name(self, sym) -> str:
        """The tensorforge name of a sympy symbol; unbacked (data-dependent) ones are refused."""
        sym = self._alias.get(sym, sym)
        got = self._names.get(sym)
        if got is not None:
            return got
        if sym not in self.ranges:
            raise UnsupportedOpError(
                f"the size {sym} depends on tensor values (a data-dependent size such as nonzero's "
                f"or .item()'s); tensorforge's torch frontend compiles sizes that follow from input shapes")
        return self._assign(sym, str(sym))

    def dim(self, d) -> Dim:
        """An int, a ``torch.SymInt`` or a sympy expression as a dim."""
        if isinstance(d, bool):
            raise UnsupportedOpError(f"a bool ({d}) where a size was expected")
        if isinstance(d, int):
            return d
        expr = getattr(getattr(d, "node", None), "expr", d)      # SymInt -> its sympy expr
        if getattr(expr, "is_Integer", False):
            return int(expr)
        return as_dim(sympy_to_expr(expr, self.name))

    def shape(self, val) -> tuple[Dim, ...]:
        """The shape of a (fake) tensor as dims."""
        return tuple(self.dim(d) for d in val.shape)

    def table(self, used: Iterable[str]) -> SymbolTable:
        """The symbol table for the symbols named ``used``, in that order."""
        by_name = {n: s for s, n in self._names.items()}
        out = []
        for name in used:
            sym = by_name.get(name)
            lo, hi = self.ranges.get(sym, (1, None)) if sym is not None else (1, None)
            hint = self.hints.get(sym) if sym is not None else None
            out.append(SymbolRange(name, lo=lo, hi=hi, hint=hint))
        return SymbolTable(out)

    # -- FxImporter hooks ----------------------------------------------------------------
    @staticmethod
    def is_scalar_node(node) -> bool:
        """Nodes whose traced value is a Python/Sym scalar (a size, a size predicate)."""
        import torch

        val = node.meta.get("val", node.meta.get("example_value"))
        return isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat)) or (
            node.op == "call_function" and _is_sym_arith(node.target) and isinstance(val, (int, bool, float)))

    def scalar_value(self, node):
        """The value of a scalar node: a dim for SymInts, None for predicates (only asserts use
        them), refused for SymFloats."""
        import torch

        val = node.meta.get("val", node.meta.get("example_value"))
        if isinstance(val, (torch.SymBool, bool)):
            return None
        if isinstance(val, (torch.SymFloat, float)):
            raise UnsupportedOpError(f"FX node '{node.name}' is a symbolic float ({val}); tensorforge "
                                     f"computes sizes as integers")
        return self.dim(val)

    def provably_nonneg(self, d: Dim) -> bool:
        """``d >= 0`` over the declared ranges: every non-constant term grows with its symbols
        (non-negative coefficients, symbols are sizes) and ``d`` at the lower bounds is >= 0."""
        e = as_expr(d)
        if any(c < 0 for m, c in e.terms.items() if m != ()):
            return False
        lows = {self._names[s]: lo for s, (lo, _) in self.ranges.items() if s in self._names}
        return e.evaluate({s: lows.get(s, 0) for s in e.symbols()}) >= 0

    def handler(self, name: str):
        """The symbolic version of the ATen handler ``name``, if it has one."""
        return _SYMBOLIC_HANDLERS.get(name)

    def bind_arguments(self, func) -> None:
        """Remembers which function argument axis binds each symbol (for ``dim_tensor``) and
        checks every symbol of the model is bound by some input axis."""
        self._binders = {}
        for arg in func.args:
            for axis, d in enumerate(getattr(arg.type, "shape", ())):
                if isinstance(d, str) and d in self._taken:
                    self._binders.setdefault(d, (arg, axis))

    def finish(self, func) -> None:
        """Puts the symbol table on ``func`` (symbols in order of first appearance in the inputs)."""
        order: dict[str, None] = {}
        for arg in func.args:
            for d in getattr(arg.type, "shape", ()):
                for s in sorted(symbols_of(d)):
                    order.setdefault(s, None)
        for v in func.outputs:
            for d in getattr(v.type, "shape", ()):
                for s in sorted(symbols_of(d)):
                    order.setdefault(s, None)
        unbound = [s for s in order if s not in (self._binders or {})]
        if unbound:
            raise UnsupportedOpError(
                f"the symbolic size(s) {', '.join(unbound)} are not the size of any input axis; "
                f"declare each dynamic dim on an input (torch.export.Dim)")
        set_symbol_table(func, self.table(order))

    def dim_tensor(self, cx, dim: Dim, dtype: DType) -> Value:
        """A rank-0 tensor holding ``dim`` at run time, in ``dtype``: ``graph.shape_of`` of the
        input that binds each symbol, then the dim's arithmetic on i64 scalars."""
        if isinstance(dim, int):
            return cx.scalar(dim, dtype)
        v = self._i64(cx, as_expr(dim))
        return cx.cast(v, dtype)

    def _i64(self, cx, e: Expr) -> Value:
        key = ("expr", str(e))
        got = self._dim_values.get(key)
        if got is not None:
            return got
        total = None
        for mono, coeff in e._key:
            term = cx.scalar(abs(coeff), DType.i64) if (mono == () or abs(coeff) != 1) else None
            for atom, power in mono:
                a = self._atom(cx, atom)
                for _ in range(power):
                    term = a if term is None else cx.g.mul(term, a)
            if total is None:
                total = term if coeff > 0 else cx.g.neg(term)
            else:
                total = cx.g.add(total, term) if coeff > 0 else cx.g.sub(total, term)
        total = cx.scalar(0, DType.i64) if total is None else total
        self._dim_values[key] = total
        return total

    def _atom(self, cx, atom) -> Value:
        if isinstance(atom, str):
            return self._symbol(cx, atom)
        op, x, y = atom
        a = self._i64(cx, x)
        b = self._i64(cx, y) if isinstance(y, Expr) else cx.scalar(int(y), DType.i64)
        if op == "//":          # operands are sizes (>= 0): truncating division is floor division
            return cx.g.div(a, b)
        if op == "%":
            return cx.g.mod(a, b)
        return cx.g.min(a, b) if op == "min" else cx.g.max(a, b)

    def _symbol(self, cx, name: str) -> Value:
        key = ("sym", name)
        got = self._dim_values.get(key)
        if got is not None:
            return got
        if self._binders is None or name not in self._binders:
            raise UnsupportedOpError(f"the symbolic size '{name}' is used as a value but is not the "
                                     f"size of any input axis")
        arg, axis = self._binders[name]
        shape = cx.g.shape_of(arg)
        one = cx.g.slice(shape, starts=(axis,), ends=(axis + 1,), axes=(0,), steps=(1,))
        v = self._dim_values[key] = cx.g.reshape(one, shape=())
        return v


def _ident(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in text)


def _value_range(vr) -> tuple[int, int | None]:
    """torch's ValueRanges as (lo, hi); infinite bounds become 1 / None (sizes are >= 0; an
    unbounded-below size is still a size)."""
    lo_i, hi_i = _finite_int(vr.lower), _finite_int(vr.upper)
    return max(lo_i or 0, 0), hi_i


def _finite_int(v) -> int | None:
    """``v`` as an int, None for torch's ``int_oo`` / sympy's ``oo``."""
    if isinstance(v, int):
        return v
    return int(v) if getattr(v, "is_Integer", False) else None


def _placeholder_values(graph) -> list:
    return [n.meta.get("val", n.meta.get("example_value")) for n in graph.find_nodes(op="placeholder")]


def _shape_env(values: Sequence):
    """The ShapeEnv behind the SymInts of some traced values (None when all are static)."""
    import torch

    for v in values:
        dims = [v] if isinstance(v, torch.SymInt) else list(getattr(v, "shape", ()))
        for d in dims:
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    return None


def _hints(env, symbols: Iterable) -> dict:
    """The example's size of each symbol (the shape env's backed value)."""
    if env is None:
        return {}
    vals = getattr(env, "backed_var_to_val", None)
    if vals is None:
        vals = env.var_to_val
    out = {}
    for s in symbols:
        v = vals.get(s)
        if v is not None and getattr(v, "is_Integer", isinstance(v, int)):
            out[s] = int(v)
    return out


def _debug_names(env, symbols: Iterable) -> dict:
    """The user's name of each symbol: ``torch.export.Dim("batch")`` is recorded by the shape env
    as the debug name of the source (``L['x'].size()[0]``) that introduced the symbol."""
    if env is None:
        return {}
    by_source = getattr(env, "source_name_to_debug_name", None) or {}
    out = {}
    for s in symbols:
        for src in env.var_to_sources.get(s, ()):
            name = by_source.get(src.name() if callable(src.name) else src.name)
            if name:
                out[s] = name
                break
    return out


def _is_sym_arith(target) -> bool:
    """Python-level arithmetic on sizes that export and AOT leave in graphs (``operator.mul``,
    ``torch.sym_max``, ``math.floor`` ...)."""
    mod = getattr(target, "__module__", "") or ""
    return target in _SYM_OPS or mod in ("_operator", "math") or getattr(target, "__name__", "").startswith("sym_")


_SYM_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
            operator.truediv, operator.pow, operator.eq, operator.ne, operator.lt, operator.le,
            operator.gt, operator.ge, operator.and_, operator.or_, operator.not_}


# ---- symbolic ATen handlers -------------------------------------------------------------------
# Each falls back to the static handler when every size it sees is an int, so a model with
# symbols only changes the ops that actually touch them.

_SYMBOLIC_HANDLERS: dict[str, Callable] = {}


def _symbolic(*names: str):
    def deco(fn):
        for n in names:
            _SYMBOLIC_HANDLERS[n] = fn
        return fn
    return deco


def _static(name: str):
    from . import torch as tf_torch
    return tf_torch._HANDLERS[name]


def _all_static(*dims) -> bool:
    return all(d is None or isinstance(d, (int, float)) for d in dims)


@_symbolic("slice.Tensor", "slice_copy.Tensor")
def _slice(cx, node, x, dim=0, start=None, end=None, step=1):
    """``x[start:end:step]`` along ``dim`` with a symbolic axis or bound: ``graph.slice`` takes
    dims as bounds (the count is torch's traced size; ``Slice.verify`` proves a symbolic end
    stays inside the axis from the declared ranges)."""
    from . import torch as tf_torch

    axis = dim % x.type.rank
    n = x.type.shape[axis]
    if _all_static(n, start, end):
        return _static(tf_torch._op_name(node.target))(cx, node, x, dim, start, end, step)
    count = cx.out_shape()[axis]
    begin = 0 if start is None else start
    if _provably_nonpos(begin) and begin != 0:         # counts from the end: x[-1:], x[-t:]
        begin = _dim_sum(n, begin)
    if isinstance(begin, int) and begin == 0 and step == 1 and count == n:
        return x
    if not cx.symbolic.provably_nonneg(begin):
        raise cx.unsupported(f"slice start {start} on an axis of size {n}: its sign depends on the sizes")
    from ..ir.symbolic import dim_add, dim_mul
    stop = dim_add(begin, dim_mul(step, count)) if step != 1 else dim_add(begin, count)
    return cx.g.slice(x, starts=(begin,), ends=(stop,), axes=(axis,), steps=(step,))


@_symbolic("select.int", "select_copy.int")
def _select(cx, node, x, dim, index):
    from . import torch as tf_torch

    axis = dim % x.type.rank
    n = x.type.shape[axis]
    if _all_static(n, index):
        return _static(tf_torch._op_name(node.target))(cx, node, x, dim, index)
    if isinstance(index, int) and index < 0:
        index = _dim_sum(n, index)
    return cx.g.gather(x, cx.symbolic.dim_tensor(cx, index, DType.i64), axis=axis)


@_symbolic("arange.start_step", "arange.start", "arange.default")
def _arange(cx, node, *_):
    from . import torch as tf_torch

    (size,) = cx.out_shape()
    start, step = cx.args.get("start", 0), cx.args.get("step", 1)
    if _all_static(size, start, step):
        return _static(tf_torch._op_name(node.target))(cx, node)
    return _arange_values(cx, size, start, step, cx.out_dtype())


@_symbolic("full.default", "full_like.default", "scalar_tensor.default", "zeros.default", "ones.default",
           "zeros_like.default", "ones_like.default", "new_zeros.default", "new_ones.default",
           "new_full.default")
def _full(cx, node, *args):
    """A constant of a symbolic shape is a scalar expanded; a symbolic fill value is read at run
    time."""
    from . import torch as tf_torch

    name = tf_torch._op_name(node.target)
    base = name.split(".")[0]
    fill = {"zeros": 0, "ones": 1, "zeros_like": 0, "ones_like": 1, "new_zeros": 0, "new_ones": 1}.get(base)
    if fill is None:
        fill = args[0] if base == "scalar_tensor" else args[1] if base in ("full", "full_like") else args[2]
    shape, dt = cx.out_shape(), cx.out_dtype()
    if _all_static(*shape, fill):
        return _static(name)(cx, node, *args)
    value = cx.symbolic.dim_tensor(cx, fill, dt) if isinstance(fill, str) else cx.scalar(fill, dt)
    return cx.g.expand(value, shape=shape) if shape else value


@_symbolic("var.correction", "var.dim")
def _var(cx, node, x, dim=None, correction=None, keepdim=False):
    from . import torch as tf_torch
    from ..ir.symbolic import dim_prod, dim_sub

    if isinstance(correction, bool):
        correction = 1 if correction else 0
    correction = 1 if correction is None else correction
    axes = tf_torch._axes(dim, x.type.rank) or tuple(range(x.type.rank))
    count = dim_prod(x.type.shape[a] for a in axes)
    if isinstance(count, int):
        return _static(tf_torch._op_name(node.target))(cx, node, x, dim, correction, keepdim)
    centered = cx.g.sub(x, cx.g.reduce_mean(x, axes=axes, keepdims=True))
    total = cx.g.reduce_sum(cx.g.mul(centered, centered), axes=axes, keepdims=bool(keepdim))
    denom = cx.g.max(cx.symbolic.dim_tensor(cx, dim_sub(count, correction), x.type.dtype),
                     cx.scalar(0.0, x.type.dtype))
    return cx.g.div(total, denom)


@_symbolic("split.Tensor", "split_copy.Tensor")
def _split(cx, node, x, split_size, dim=0):
    from . import torch as tf_torch

    n = x.type.shape[dim % x.type.rank]
    if isinstance(n, str) or isinstance(split_size, str):
        vals = cx.meta()
        if len(vals) == 1:
            return [x]
        raise cx.unsupported(f"split of an axis of symbolic size {n} into pieces of {split_size} "
                             f"(the number of pieces would depend on the size)")
    return _static(tf_torch._op_name(node.target))(cx, node, x, split_size, dim)


@_symbolic("prims.convert_element_type.default")
def _convert_element_type(cx, node, x, dtype):
    """With ``dynamic=True`` Dynamo passes Python floats of the frame (a softmax scale) as 0-d
    f64 tensor inputs instead of constants, and AOT casts them with this prim."""
    return cx.cast(x, cx.out_dtype())


@_symbolic("true_divide.Tensor")
def _true_divide(cx, node, a, b):
    """Float arithmetic of those f64 inputs (``2.0 / scale``) reaches the graph as tensor ops."""
    dt = cx.out_dtype()
    return cx.g.div(cx.tensor(a, dt), cx.tensor(b, dt))


def _arange_values(cx, count: Dim, start, step, dtype: DType) -> Value:
    """``start + step * i`` for i in [0, count): ``graph.iota`` over a symbolic size, shifted and
    scaled by symbolic ``start``/``step`` read at run time."""
    work = DType.i64 if all(isinstance(v, (int, str)) for v in (start, step)) else DType.f64
    i = cx.g.iota(size=count, start=0.0, step=1.0, dtype=work)
    if step != 1:
        i = cx.g.mul(i, _scalar_or_dim(cx, step, work))
    if start != 0:
        i = cx.g.add(i, _scalar_or_dim(cx, start, work))
    return cx.cast(i, dtype)


def _scalar_or_dim(cx, v, dtype: DType) -> Value:
    return cx.symbolic.dim_tensor(cx, v, dtype) if isinstance(v, str) else cx.scalar(v, dtype)


def _dim_sum(a: Dim, b: Dim) -> Dim:
    from ..ir.symbolic import dim_add
    return dim_add(a, b)


def _provably_nonpos(d: Dim) -> bool:
    """``d <= 0`` for all sizes: no positive coefficient (symbols are sizes, >= 0)."""
    return all(c <= 0 for c in as_expr(d).terms.values())


# ---- entry points ---------------------------------------------------------------------------------

def is_symbolic_graph(example_inputs: Sequence) -> bool:
    """Whether Dynamo traced a graph with dynamic shapes (it passes SymInts among the inputs)."""
    import torch

    return any(isinstance(x, torch.SymInt) for x in example_inputs)


def symint_placeholders(graph) -> set[str]:
    """Names of the placeholders that are sizes, not tensors (Dynamo's ``s0`` inputs)."""
    return {n.name for n in graph.find_nodes(op="placeholder") if SymbolicShapes.is_scalar_node(n)}


def import_torch_dynamic(module, example_inputs: Sequence, dynamic_shapes: Any):
    """Exports ``module`` with torch.export's ``dynamic_shapes`` spec and imports it with symbolic
    dims: the result's ``main`` has inputs like ``tensor<batchx784xf32>`` and the symbol table
    (``symbol_table_of(module.main)``) holds each symbol's range and the example's size."""
    from .torch import import_torch
    return import_torch(module, example_inputs, dynamic_shapes)
