"""Declarative op definitions: one place per op for everything a pass needs to know.

An op is defined by subclassing ``OpDef`` and decorating it with ``@register``::

    @register
    class Exp(UnaryElementwise):
        name = "graph.exp"
        compute = staticmethod(np.exp)
        flops = 8

The verifier, the text printer/parser, the reference interpreter, the fusion pass and the
cost model all read this definition; nothing is repeated per pass.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import IRError, ShapeError
from .attributes import Dense, check_attr
from .types import DType, TensorType, Type

# ---- traits ---------------------------------------------------------------------------
PURE = "pure"                  # no side effects: may be CSE'd, DCE'd, reordered
COMMUTATIVE = "commutative"    # binary op whose operands may be swapped
ELEMENTWISE = "elementwise"    # result[i] depends only on operand[i] (after broadcasting)
SAME_SHAPE = "same_shape"      # result shape equals the (first) operand's shape
TERMINATOR = "terminator"      # ends a block
CONSTANT_LIKE = "constant"     # produces a compile-time constant
SHAPE_ONLY = "shape_only"      # reads only the operand's type (shape_of)
IS_SYMBOL = "symbol"           # defines a named symbol (func.func)


class FusionKind(enum.IntEnum):
    """How an op may take part in a fused kernel; ordered as in the design doc."""

    ELEMENTWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    OUT_ELEMENTWISE_FUSABLE = 4
    OPAQUE = 5


REQUIRED = object()


@dataclass(frozen=True)
class Attr:
    """Declares an attribute: its kind (see ``_COERCE``), default, and an optional doc."""

    kind: str
    default: Any = REQUIRED
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def _as_int(v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError("expected an integer")
    return int(v)


def _as_float(v):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise TypeError("expected a number")
    return float(v)


def _as_bool(v):
    if not isinstance(v, (bool, np.bool_)):
        raise TypeError("expected a bool")
    return bool(v)


def _as_str(v):
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


def _as_ints(v):
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    return tuple(_as_int(x) for x in v)


def _as_dims(v):
    out = []
    for x in v:
        if isinstance(x, str) and x:
            out.append(x)
        else:
            out.append(_as_int(x))
    return tuple(out)


def _as_dim(v):
    if isinstance(v, str) and v:
        return v
    return _as_int(v)


def _as_floats(v):
    if isinstance(v, (int, float, np.number)) and not isinstance(v, bool):
        return (float(v),)
    return tuple(_as_float(x) for x in v)


def _as_dtype(v):
    if isinstance(v, DType):
        return v
    if isinstance(v, str):
        return DType.parse(v)
    return DType.from_np(v)


def _as_dense(v):
    return v if isinstance(v, Dense) else Dense(np.asarray(v))


def _as_type(v):
    if not isinstance(v, Type):
        raise TypeError("expected a type")
    return v


def _as_any(v):
    return check_attr(v)


_COERCE: dict[str, Callable[[Any], Any]] = {
    "int": _as_int, "float": _as_float, "bool": _as_bool, "str": _as_str, "ints": _as_ints,
    "floats": _as_floats, "dims": _as_dims, "dim": _as_dim, "dtype": _as_dtype, "dense": _as_dense, "type": _as_type, "any": _as_any,
}


@dataclass
class Cost:
    """Work of one op: arithmetic and memory traffic (each operand read once, results written once)."""

    flops: float
    bytes: float


class OpDef:
    """Base of op definitions.  Subclasses set class attributes and override hooks.

    ``operands``: names; a trailing ``?`` marks an optional trailing operand, a trailing
    ``*`` a variadic one (only the last).  ``results``: names, same convention.
    """

    name: str = ""
    operands: tuple[str, ...] = ()
    results: tuple[str, ...] = ("out",)
    attrs: dict[str, Attr] = {}
    traits: frozenset[str] = frozenset()
    fusion: FusionKind = FusionKind.OPAQUE
    flops: float = 0.0                      # flops per output element (elementwise ops)
    doc: str = ""
    op_class: type | None = None            # Operation subclass to instantiate (builtin ops)

    # ---- attribute handling ----------------------------------------------------------
    def normalize_attrs(self, given: dict[str, Any], where: str = "") -> dict[str, Any]:
        """Check, coerce and fill defaults; unknown attribute names are errors."""
        out: dict[str, Any] = {}
        for key, value in given.items():
            spec = self.attrs.get(key)
            if spec is None:
                if key.startswith("_") or key.startswith("tf."):   # discardable annotations
                    out[key] = check_attr(value, f"'{self.name}' attribute '{key}'")
                    continue
                known = ", ".join(self.attrs) or "none"
                raise IRError(f"'{self.name}'{where}: unknown attribute '{key}' (known: {known})")
            if value is None:
                continue
            try:
                out[key] = _COERCE[spec.kind](value)
            except (TypeError, ValueError) as e:
                raise IRError(f"'{self.name}'{where}: attribute '{key}' = {value!r}: "
                              f"{e} (kind {spec.kind})") from None
        for key, spec in self.attrs.items():
            if key not in out:
                if spec.required:
                    raise IRError(f"'{self.name}'{where}: missing required attribute '{key}'")
                if spec.default is not None:
                    out[key] = _COERCE[spec.kind](spec.default)
        return out

    # ---- operand layout --------------------------------------------------------------
    def operand_range(self) -> tuple[int, int | None]:
        """(minimum, maximum) operand count; maximum None means unbounded."""
        return _count_range(self.operands)

    def result_range(self) -> tuple[int, int | None]:
        return _count_range(self.results)

    # ---- hooks -----------------------------------------------------------------------
    def infer(self, types: Sequence[Type], attrs: dict[str, Any]) -> list[Type]:
        """Result types from operand types and (normalised) attributes."""
        if not self.results:
            return []
        raise IRError(f"'{self.name}' cannot infer its result types; pass result_types")

    def compute(self, *args, **attrs):
        """NumPy reference semantics: operand arrays and attributes to result array(s)."""
        raise IRError(f"'{self.name}' has no reference semantics")

    def evaluate(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any],
                 result_types: Sequence[Type]) -> list[np.ndarray]:
        """Runs ``compute`` and casts each result to the declared element type."""
        public = {k: v for k, v in attrs.items() if not k.startswith("_") and not k.startswith("tf.")}
        out = self.compute(*inputs, **public)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        fixed = []
        for arr, t in zip(outs, result_types):
            arr = np.asarray(arr)
            if isinstance(t, TensorType) and arr.dtype != t.dtype.np:
                arr = arr.astype(t.dtype.np)
            fixed.append(arr)
        return fixed

    def cost(self, operand_types: Sequence[Type], result_types: Sequence[Type],
             attrs: dict[str, Any]) -> Cost:
        from .symbolic import hint_elements, hint_nbytes    # symbolic dims count as their hints
        out_elems = sum(hint_elements(t.shape) for t in result_types if isinstance(t, TensorType))
        nbytes = sum(hint_nbytes(t) for t in list(operand_types) + list(result_types) if isinstance(t, TensorType))
        return Cost(self.flops * out_elems, nbytes)

    def verify(self, op) -> None:
        """Extra op-specific checks beyond counts, attributes and inferred types; raise ShapeError."""

    def fold(self, op, constants: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
        """Constant folding hook; default evaluates the reference when every operand is known."""
        if PURE not in self.traits or any(c is None for c in constants):
            return None
        return self.evaluate(constants, op.attributes, [r.type for r in op.results])

    def __repr__(self):
        return f"<OpDef {self.name}>"


def _count_range(names: Sequence[str]) -> tuple[int, int | None]:
    lo, hi = 0, 0
    for n in names:
        if n.endswith("*"):
            return lo, None
        hi += 1
        if not n.endswith("?"):
            lo += 1
    return lo, hi


_REGISTRY: dict[str, OpDef] = {}


def register(cls):
    """Class decorator: instantiate the definition once and make it known by its name."""
    if not cls.name or "." not in cls.name:
        raise IRError(f"op definition {cls.__name__} needs a 'dialect.op' name")
    if cls.name in _REGISTRY:
        raise IRError(f"op '{cls.name}' is defined twice")
    inst = cls()
    _REGISTRY[cls.name] = inst
    return cls


def lookup(name: str) -> OpDef | None:
    """The definition of ``name``, or None for an unregistered op."""
    d = _REGISTRY.get(name)
    if d is None and "." in name and name.split(".", 1)[0] in _LAZY_DIALECTS:
        _load_dialect(name.split(".", 1)[0])
        d = _REGISTRY.get(name)
    return d


def registered_ops(dialect: str | None = None) -> dict[str, OpDef]:
    if dialect is not None:
        _load_dialect(dialect)
    return {k: v for k, v in _REGISTRY.items() if dialect is None or k.startswith(dialect + ".")}


_LAZY_DIALECTS = {"graph": "tensorforge.dialects.graph", "scalar": "tensorforge.dialects.scalar",
                  "structured": "tensorforge.dialects.structured", "loop": "tensorforge.dialects.loop"}


def _load_dialect(dialect: str) -> None:
    mod = _LAZY_DIALECTS.get(dialect)
    if mod:
        import importlib
        importlib.import_module(mod)


def register_dialect_module(dialect: str, module: str) -> None:
    """Lets a dialect be imported lazily the first time one of its ops is looked up."""
    _LAZY_DIALECTS[dialect] = module


def expect(cond: bool, message: str) -> None:
    """Shape-inference helper: raise a ShapeError unless ``cond``."""
    if not cond:
        raise ShapeError(message)
