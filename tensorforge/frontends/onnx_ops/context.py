"""What an ONNX op handler works with: the node it converts and the import context.

``OnnxNode`` wraps a ``NodeProto`` and records which attributes a handler read, so that an
attribute no handler understands is reported instead of silently ignored.  ``ImportContext``
emits graph ops, makes constants, and evaluates operands that must be known at import
time (shapes, axes, pads...) by folding the ops that compute them.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Sequence

import numpy as np
import onnx
from onnx import AttributeProto

from ...errors import FrontendError, UnsupportedOpError
from ...ir.attributes import Dense
from ...ir.builder import Builder, make_op
from ...ir.builtin import FuncOp
from ...ir.core import Value
from ...ir.opdef import PURE, SHAPE_ONLY, lookup
from ...ir.symbolic import SymbolRange, SymbolTable, as_expr, dim_sub, set_symbol_table, symbols_of
from ...ir.types import Dim, DType
from ...passes.graph.shape_prop import Partial, _small_static, partial_value
from .bindings import SymbolNames, symbol_sites, unbound_error
from .dtypes import onnx_type_name, tensor_to_numpy, to_dtype
from .errors import NonConstantInputError
from .symbolic import provably_le, ranges_of, symbolic_vector

_MISSING = object()


def _same_kind(value: Any, default: Any) -> bool:
    """Whether an attribute value is of the kind a handler's default says it expects."""
    if isinstance(default, bool) or isinstance(default, int):
        return isinstance(value, int)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, str):
        return isinstance(value, str)
    if isinstance(default, tuple):
        return isinstance(value, tuple)
    return True


def _walk_upstream(v: Value, visit: Callable[[Value], bool]) -> None:
    """Calls ``visit`` once on ``v`` and on each value it is computed from (depth first); the
    operands of a value's producer are walked only when ``visit`` returned True for it."""
    seen: set[Value] = set()
    stack = [v]
    while stack:
        cur = stack.pop()
        if cur in seen:
            continue
        seen.add(cur)
        if visit(cur) and cur.op is not None:
            stack.extend(cur.op.operands)


def _decode_attr(a: AttributeProto, node: "OnnxNode") -> Any:
    t = a.type
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.STRING:
        return _utf8(a.s, a, node)
    if t == AttributeProto.INTS:
        return tuple(int(x) for x in a.ints)
    if t == AttributeProto.FLOATS:
        return tuple(float(x) for x in a.floats)
    if t == AttributeProto.STRINGS:
        return tuple(_utf8(s, a, node) for s in a.strings)
    if t == AttributeProto.TENSOR:
        if to_dtype(a.t.data_type) is None:
            raise node.unsupported(f"attribute '{a.name}' holds a {onnx_type_name(a.t.data_type)} tensor")
        return tensor_to_numpy(a.t, what=f"{node.describe()}: the tensor of attribute '{a.name}'")
    if t in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise node.unsupported(f"attribute '{a.name}' is a subgraph (control flow is not supported)")
    if t not in AttributeProto.AttributeType.values():
        raise node.invalid(f"attribute '{a.name}' has the unknown kind {t}: the model is corrupt")
    raise node.unsupported(f"attribute '{a.name}' of kind {AttributeProto.AttributeType.Name(t)}")


def _utf8(raw: bytes, a: AttributeProto, node: "OnnxNode") -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise node.invalid(f"string attribute '{a.name}' is not valid UTF-8 ({raw[:40]!r}): the model is "
                           f"corrupt") from None


@functools.lru_cache(maxsize=None)
def _schema_attr_kinds(op_type: str, opset: int, domain: str) -> dict[str, int]:
    """Attribute name -> the ``AttributeProto`` kind the ONNX schema of this op version declares
    (empty when onnx has no schema for it: a custom op, a too-new opset)."""
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return {}
    return {name: int(attr.type) for name, attr in schema.attributes.items()}


# A tensor above this many bytes is a corrupt or wrong shape, not a model tensorforge can hold:
# its op is refused at import (naming the node and the type) instead of trying to allocate it.
MAX_TENSOR_BYTES = 1 << 38
# Import-time folding (shape operands, constant subgraphs) skips results above this size: they
# stay ops for the graph passes, whose constant folding has its own limit.
MAX_IMPORT_FOLD_BYTES = 1 << 30


def _type_nbytes(t) -> int | None:
    """The byte size of a static tensor type, None for a symbolic (or non-tensor) one."""
    shape = getattr(t, "shape", None)
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape) * t.dtype.itemsize


class OnnxNode:
    """One ONNX node as handlers see it: named inputs resolved to graph values, tracked attributes."""

    __slots__ = ("proto", "name", "op_type", "domain", "opset", "inputs", "outputs", "_attrs", "_used")

    def __init__(self, proto: onnx.NodeProto, opset: int, inputs: Sequence[Value | None], index: int):
        self.proto = proto
        self.op_type = proto.op_type
        self.name = proto.name or f"{proto.op_type}_{index}"
        self.domain = proto.domain or ""
        self.opset = opset
        self.inputs = list(inputs)
        self.outputs = list(proto.output)
        self._attrs = {a.name: a for a in proto.attribute}
        self._used: set[str] = set()

    # ---- errors ------------------------------------------------------------------------
    def describe(self) -> str:
        return f"ONNX node '{self.name}' ({self.op_type}, opset {self.opset})"

    def unsupported(self, what: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.describe()}: {what}")

    def invalid(self, what: str) -> FrontendError:
        """A node that breaks the ONNX spec (wrong attribute kind, corrupt data)."""
        return FrontendError(f"{self.describe()}: {what}")

    # ---- attributes --------------------------------------------------------------------
    def attr(self, key: str, default: Any = _MISSING) -> Any:
        """The attribute's value, or ``default``; a missing attribute without default is an error."""
        self._used.add(key)
        a = self._attrs.get(key)
        if a is None:
            if default is _MISSING:
                raise self.unsupported(f"required attribute '{key}' is missing")
            return default
        if a.ref_attr_name:
            raise self.unsupported(f"attribute '{key}' refers to a function attribute")
        want = _schema_attr_kinds(self.op_type, self.opset, self.domain).get(key)
        if want is not None and a.type != want:
            name = AttributeProto.AttributeType.Name
            got = name(a.type) if a.type in AttributeProto.AttributeType.values() else f"kind {a.type}"
            raise self.invalid(f"attribute '{key}' is {got}, but ONNX declares it {name(want)}: the model is "
                               f"corrupt or was written by a broken exporter")
        value = _decode_attr(a, self)
        if default is not _MISSING and default is not None and not _same_kind(value, default):
            raise self.invalid(f"attribute '{key}' holds {value!r}, not a {type(default).__name__} like its "
                               f"default {default!r}")
        return value

    def has_attr(self, key: str) -> bool:
        return key in self._attrs

    def ignore(self, *keys: str) -> None:
        """Marks attributes that do not change inference results (training hints, seeds...)."""
        self._used.update(keys)

    def unused_attrs(self) -> list[str]:
        return sorted(k for k in self._attrs if k not in self._used)

    # ---- inputs and outputs -------------------------------------------------------------
    def input(self, i: int) -> Value | None:
        """Input ``i``, or None when it is absent (past the end or an empty name)."""
        return self.inputs[i] if i < len(self.inputs) else None

    def required(self, i: int, what: str = "") -> Value:
        v = self.input(i)
        if v is None:
            raise self.unsupported(f"input #{i}{' (' + what + ')' if what else ''} is missing")
        return v

    def wants(self, i: int) -> bool:
        """Whether output ``i`` exists and is used (optional outputs have empty names)."""
        return i < len(self.outputs) and bool(self.outputs[i])


class ImportContext:
    """Emits graph ops for the node being converted and folds import-time constants."""

    def __init__(self, func: FuncOp, opset: int, table: SymbolTable | None = None,
                 user_bounds: dict[str, tuple[bool, bool]] | None = None, names: SymbolNames | None = None):
        self.func = func
        self.opset = opset
        self.builder: Builder = func.builder()
        self.node: OnnxNode | None = None
        self._folded: dict[Value, np.ndarray] = {}
        self.table = table if table is not None else SymbolTable()
        self.user_bounds = dict(user_bounds or {})      # symbol -> (user gave min, user gave max)
        self.names = names if names is not None else SymbolNames()
        self.range_of = ranges_of(self.table)
        set_symbol_table(func, self.table)              # graph.slice's verifier reads the ranges

    # ---- emitting ops -------------------------------------------------------------------
    def op(self, short: str, *operands: Value | Sequence[Value] | None, **attrs: Any) -> Any:
        """Emits ``graph.<short>``; one result gives a Value, several a tuple.  A result type too
        large for any machine (``MAX_TENSOR_BYTES``, e.g. a corrupt dim of 2**40) is refused."""
        name = f"graph.{short}"
        if lookup(name) is None:
            raise self._unsupported(f"needs the graph op '{name}', which is not available")
        flat: list[Value] = []
        for o in operands:
            if isinstance(o, (list, tuple)):
                flat.extend(o)
            elif o is not None:
                flat.append(o)
        attrs = {k: v for k, v in attrs.items() if v is not None}
        op = make_op(name, flat, attrs, None, (), self.builder.loc)
        for r in op.results:
            nbytes = _type_nbytes(r.type)
            if nbytes is not None and nbytes > MAX_TENSOR_BYTES:
                what = f"its result {r.type} would take {nbytes / 2**40:.1f} TiB"
                msg = f"{what}: a dimension is corrupt or wrong (check the shapes of its inputs and attributes)"
                raise self.node.invalid(msg) if self.node is not None else FrontendError(msg)
        op = self.builder.insert(op)
        return op.results[0] if len(op.results) == 1 else tuple(op.results)

    def _unsupported(self, what: str) -> UnsupportedOpError:
        return self.node.unsupported(what) if self.node is not None else UnsupportedOpError(what)

    def const(self, value: Any, dtype: DType | None = None) -> Value:
        """A ``graph.constant`` from an array or number (in ``dtype`` when given)."""
        arr = np.asarray(value)
        if dtype is not None and arr.dtype != dtype.np:
            arr = arr.astype(dtype.np)
        dense = Dense(arr, dtype)
        v = self.op("constant", value=dense)
        self._folded[v] = dense.array
        return v

    def scalar(self, value: float | int | bool, like: Value | DType) -> Value:
        """A 0-d constant in the element type of ``like``."""
        dtype = like if isinstance(like, DType) else self.dtype(like)
        return self.const(np.asarray(value).astype(dtype.np), dtype)

    def cast(self, v: Value, dtype: DType) -> Value:
        return v if self.dtype(v) is dtype else self.op("cast", v, dtype=dtype)

    # ---- types ---------------------------------------------------------------------------
    @staticmethod
    def dtype(v: Value) -> DType:
        return v.type.dtype

    @staticmethod
    def shape(v: Value) -> tuple[Dim, ...]:
        return v.type.shape

    @staticmethod
    def rank(v: Value) -> int:
        return len(v.type.shape)

    def static_shape(self, v: Value, what: str = "this op") -> tuple[int, ...]:
        """The shape of ``v`` when every dimension is known; otherwise an UnsupportedOpError."""
        shape = v.type.shape
        if not all(isinstance(d, int) for d in shape):
            raise self.unbound(f"{what} needs static dimensions, got {v.type}", shape)
        return shape  # type: ignore[return-value]

    # ---- import-time constants ------------------------------------------------------------
    def value_of(self, v: Value | None) -> np.ndarray | None:
        """The value of ``v`` if it can be computed now (constants and shapes of static tensors)."""
        if v is None:
            return None
        if v in self._folded:
            return self._folded[v]
        stack: list[tuple[Value, bool]] = [(v, False)]
        failed: set[Value] = set()
        while stack:
            cur, expanded = stack.pop()
            if cur in self._folded or cur in failed:
                continue
            op = cur.op
            if op is None or op.opdef is None or PURE not in op.opdef.traits:
                failed.add(cur)
                continue
            if any((_type_nbytes(r.type) or 0) > MAX_IMPORT_FOLD_BYTES for r in op.results):
                failed.add(cur)             # too big to compute at import: it stays an op
                continue
            if SHAPE_ONLY in op.opdef.traits:
                operand_values: list[np.ndarray | None] = [None] * len(op.operands)
            elif not expanded:
                stack.append((cur, True))
                stack.extend((o, False) for o in op.operands if o not in self._folded)
                continue
            else:
                operand_values = [self._folded.get(o) for o in op.operands]
                if any(x is None for x in operand_values):
                    failed.add(cur)
                    continue
            try:
                results = op.opdef.fold(op, operand_values)
            except Exception:  # a fold that cannot run is just "not constant"
                results = None
            if results is None:
                failed.add(cur)
                continue
            for r, arr in zip(op.results, results):
                self._folded[r] = np.asarray(arr)
        arr = self._folded.get(v)
        return arr if arr is not None else self._partially_known(v)

    def _partially_known(self, v: Value) -> np.ndarray | None:
        """The value of a shape vector computed from partly static shapes: ``Gather(Shape(x), 1)``
        is 16 for ``x: [batch, 16]`` although ``Shape(x)`` is not a constant.  Element-wise
        partial evaluation (``shape-prop``'s), seeded with what the import already folded."""
        if not _small_static(v.type):
            return None
        memo: dict = {}

        def visit(cur: Value) -> bool:
            known = self._folded.get(cur)
            if known is None:
                return cur.op is not None and cur.op.opdef is not None and SHAPE_ONLY not in cur.op.opdef.traits
            if _small_static(cur.type):
                memo[id(cur)] = Partial(np.asarray(known).reshape(cur.type.shape), np.ones(cur.type.shape, bool))
            return False

        _walk_upstream(v, visit)
        part = partial_value(v, memo)
        if part is None or not part.complete:
            return None
        self._folded[v] = part.values
        return part.values

    def dependencies(self, v: Value) -> tuple[list[str], list[tuple[str, int, str]]]:
        """What ``v`` is computed from: the model inputs whose *values* it reads, and the unbound
        symbolic dims ``(input, axis, name)`` whose *sizes* it reads (through ``shape_of``)."""
        names: set[str] = set()
        syms: set[str] = set()

        def visit(cur: Value) -> bool:
            if cur.is_block_arg:
                names.add(cur.name_hint or f"arg{cur.index}")
                return False
            if cur.op is not None and cur.op.opdef is not None and SHAPE_ONLY in cur.op.opdef.traits:
                syms.update(d for o in cur.op.operands for d in o.type.shape if isinstance(d, str))
                return False
            return True

        _walk_upstream(v, visit)
        return sorted(names), [site for site in self.symbol_sites() if site[2] in syms]

    def input_dependencies(self, v: Value) -> list[str]:
        """Names of the function inputs that ``v`` is computed from (by value or by shape)."""
        data, dims = self.dependencies(v)
        return sorted(set(data) | {inp for inp, _, _ in dims})

    def symbol_sites(self) -> list[tuple[str, int, str]]:
        """``(input, axis, name)`` of the first occurrence of every symbolic dim among the inputs."""
        sites = symbol_sites([(a.name_hint or f"arg{a.index}", a.type.shape) for a in self.func.args])
        return [(inp, axis, d) for d, (inp, axis) in sites.items()]

    def _unbound(self, what: str, dims: list[tuple[str, int, str]]) -> UnsupportedOpError:
        """``what`` depends on the unbound ``dims``: an error that says how to bind them."""
        if not dims:
            return self._unsupported(what + " (it depends on a dynamic dimension)")
        return unbound_error(f"{self.node.describe()}: {what}" if self.node else what, dims)

    def unbound(self, what: str, dims: Sequence[Dim]) -> UnsupportedOpError:
        """``what`` needs the symbolic ones among ``dims`` bound: an error that says how."""
        return self._unbound(what, [site for site in self.symbol_sites() if site[2] in dims])

    def unbound_dims_of(self, v: Value) -> list[tuple[str, int, str]]:
        """The unbound dims the value of ``v`` needs: exactly those in its symbolic shape vector when
        it has one (``seq`` alone for ``Gather(Shape(ids), 1)``), else every dim whose size it reads."""
        vector = self.shape_vector(v)
        if vector is None:
            return self.dependencies(v)[1]
        syms = {s for d in vector for s in symbols_of(d)}
        return [site for site in self.symbol_sites() if site[2] in syms]

    def require_const(self, v: Value, what: str) -> np.ndarray:
        """The import-time value of a shape-like operand, or an error saying why it has none."""
        arr = self.value_of(v)
        if arr is not None:
            return arr
        data, dims = self.dependencies(v)
        if data:
            msg = (f"{what} must be known at import time, but it is computed at run time from model "
                   f"input(s) {', '.join(data)}")
            raise NonConstantInputError(f"{self.node.describe()}: {msg}" if self.node else msg, data)
        raise self._unbound(f"{what} must be known at import time", self.unbound_dims_of(v) or dims)

    def shape_vector(self, v: Value) -> list[Dim] | None:
        """A 1-D (or scalar) integer value as dims, symbolic dims included, when it only depends on
        constants and tensor shapes (``Shape -> Gather -> Concat`` of a dynamic batch); else None."""
        return symbolic_vector(v, self.value_of, self.range_of)

    def dims_operand(self, v: Value, what: str) -> tuple[Dim, ...]:
        """A shape operand (Reshape/Expand/ConstantOfShape target) as dims: its import-time value,
        or its entries with symbolic dims when only symbols are unknown; else an error."""
        if self.value_of(v) is None:
            vector = self.shape_vector(v)
            if vector is not None:
                return tuple(vector)
        return self.const_ints(v, what)

    def dim_scalar(self, v: Value, what: str) -> Dim:
        """A one-element integer operand (Range's limit, a slice bound) as a number or a dim
        expression over the symbols; an error when it is neither."""
        if self.value_of(v) is None:
            vector = self.shape_vector(v)
            if vector is not None and len(vector) == 1:
                return vector[0]
        return self.const_scalar(v, what)

    # ---- facts about the symbols -----------------------------------------------------------
    def sym_sites(self, dims) -> list[tuple[str, int, str]]:
        """``(input, axis, name)`` of the input symbols that ``dims`` (dims or expressions) read."""
        syms = {s for d in dims for s in symbols_of(d)}
        return [site for site in self.symbol_sites() if site[2] in syms]

    def require_le(self, a: Dim, b: Dim, what: str) -> None:
        """Makes ``a <= b`` hold for every allowed size: proved from the symbols' ranges, or, when
        ``b - a`` is linear in one input symbol whose range the user left open on that side,
        by narrowing that range (the model cannot run outside it: ``position_ids[:seq]`` of a
        64-long table needs ``seq <= 64``).  Otherwise an ``UnboundDimError`` (then only concrete
        sizes compile); a range the user declared too wide is a ``FrontendError``."""
        if provably_le(a, b, self.range_of):
            return
        diff = as_expr(dim_sub(b, a))
        syms = diff.symbols()
        if len(syms) == 1:
            (sym,) = syms
            r = self.table.ranges.get(sym)
            terms = diff.terms
            k = terms.get(((sym, 1),))
            c = terms.get((), 0)
            if r is not None and k and set(terms) <= {((sym, 1),), ()}:
                user_lo, user_hi = self.user_bounds.get(sym, (False, False))
                if k < 0:                          # k*s + c >= 0  <=>  s <= c // -k
                    limit = c // -k
                    if user_hi and r.hi is not None and r.hi > limit:
                        raise self._range_error(sym, f"at most {limit}", what, r)
                    if limit < r.lo:
                        raise self._range_error(sym, f"at most {limit}", what, r)
                    self._narrow(SymbolRange(sym, r.lo, limit if r.hi is None else min(r.hi, limit), r.divisor))
                    return
                limit = -(c // k)                  # k*s + c >= 0  <=>  s >= ceil(-c / k)
                if user_lo and r.lo < limit:
                    raise self._range_error(sym, f"at least {limit}", what, r)
                if r.hi is not None and limit > r.hi:
                    raise self._range_error(sym, f"at least {limit}", what, r)
                self._narrow(SymbolRange(sym, max(r.lo, limit), r.hi, r.divisor))
                return
        raise self._unbound(f"{what} needs {a} <= {b}, which the ranges of its symbolic dimensions do not prove "
                            f"(declare them with dim_ranges=)", self.sym_sites([a, b]))

    def _narrow(self, r: SymbolRange) -> None:
        self.table.add(r)
        set_symbol_table(self.func, self.table)

    def _range_error(self, sym: str, need: str, what: str, r: SymbolRange) -> FrontendError:
        key = self.names.original.get(sym, sym)
        return FrontendError(f"{what} needs the symbolic dimension {self.names.display(sym)} to be {need}, "
                             f"but its range is {r.describe()}; declare a range inside that "
                             f"(dim_ranges={{'{key}': (MIN, MAX)}}; CLI: --shape {key}=MIN..MAX)")

    def const_ints(self, v: Value, what: str) -> tuple[int, ...]:
        return tuple(int(x) for x in np.asarray(self.require_const(v, what)).reshape(-1))

    def const_scalar(self, v: Value, what: str) -> Any:
        arr = np.asarray(self.require_const(v, what))
        if arr.size != 1:
            raise self._unsupported(f"{what} must hold one value, got shape {arr.shape}")
        return arr.reshape(-1)[0].item()


Handler = Callable[[ImportContext, OnnxNode], Any]
