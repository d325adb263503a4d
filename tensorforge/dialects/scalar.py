"""The ``scalar`` dialect: one element at a time, shared by the structured and loop levels.

Every elementwise ``graph`` op has a scalar twin with the same attributes (``graph.exp`` ->
``scalar.exp``), derived here from the graph definition rather than written again: the twin's
type rule and reference semantics are the graph op's, applied to rank-0 values.  Index
arithmetic (``index`` type) uses the same ops plus ``scalar.floordiv``.
"""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir.opdef import ELEMENTWISE, PURE, CONSTANT_LIKE, Attr, FusionKind, OpDef, expect, lookup, register, registered_ops
from ..ir.types import DType, IndexType, ScalarType, TensorType

INDEX = IndexType()


def element_dtype(t) -> DType:
    """The element type of a scalar-level value (``index`` computes as i64)."""
    if isinstance(t, IndexType):
        return DType.i64
    if isinstance(t, ScalarType):
        return t.dtype
    raise ShapeError(f"expected a scalar or index value, got {t}")


class ScalarTwin(OpDef):
    """A scalar op whose rules come from an elementwise graph op."""

    graph_name = ""
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE

    def infer(self, types, attrs):
        g = lookup(self.graph_name)
        as_tensors = [TensorType((), element_dtype(t)) for t in types]
        outs = g.infer(as_tensors, attrs)
        # i64 results of index arithmetic stay index; a cast always yields its dtype (to reach
        # index from integer data, use scalar.index_cast)
        index_in = self.name != "scalar.cast" and any(isinstance(t, IndexType) for t in types)
        res = []
        for t in outs:
            if index_in and t.dtype is DType.i64:
                res.append(INDEX)
            else:
                res.append(ScalarType(t.dtype))
        return res

    def compute(self, *args, **attrs):
        return lookup(self.graph_name).compute(*args, **attrs)

    def cost(self, operand_types, result_types, attrs):
        from ..ir.opdef import Cost
        return Cost(lookup(self.graph_name).flops, 0)


def _register_twins() -> None:
    for name, d in list(registered_ops("graph").items()):
        if ELEMENTWISE not in d.traits:
            continue
        short = name.split(".", 1)[1]
        cls = type(f"Scalar{type(d).__name__}", (ScalarTwin,),
                   {"name": f"scalar.{short}", "graph_name": name, "operands": d.operands,
                    "attrs": dict(d.attrs), "flops": d.flops, "__module__": __name__,
                    "doc": f"Scalar form of {name}."})
        register(cls)


_register_twins()


@register
class Const(OpDef):
    """A scalar or index literal."""

    name = "scalar.const"
    attrs = {"value": Attr("any"), "type": Attr("type")}
    traits = frozenset({PURE, CONSTANT_LIKE})

    def infer(self, types, attrs):
        t = attrs["type"]
        expect(isinstance(t, (ScalarType, IndexType)), f"type must be scalar or index, got {t}")
        expect(isinstance(attrs["value"], (bool, int, float)), "value must be a number")
        return [t]

    @staticmethod
    def compute(value, type):
        return np.asarray(value, dtype=element_dtype(type).np)


@register
class FloorDiv(OpDef):
    """Index division rounding toward -inf (reshape and pooling index maps)."""

    name = "scalar.floordiv"
    operands = ("lhs", "rhs")
    traits = frozenset({PURE, ELEMENTWISE})

    def infer(self, types, attrs):
        expect(all(isinstance(t, IndexType) for t in types), "floordiv takes index operands")
        return [INDEX]

    @staticmethod
    def compute(a, b):
        return np.floor_divide(a, b)


@register
class IndexCast(OpDef):
    """Integer data to ``index`` (gather indices, one-hot classes): the twin of ``scalar.cast``
    cannot produce ``index``, whose results the verifier re-infers from the graph cast."""

    name = "scalar.index_cast"
    operands = ("x",)
    traits = frozenset({PURE, ELEMENTWISE})

    def infer(self, types, attrs):
        (t,) = types
        expect(isinstance(t, IndexType) or (isinstance(t, ScalarType) and t.dtype.is_int),
               f"index_cast takes an integer scalar, got {t}")
        return [INDEX]

    @staticmethod
    def compute(x):
        return np.asarray(x).astype(np.int64)


@register
class DimValue(OpDef):
    """The run-time value of a symbolic dimension (``dim``: canonical expression text, see
    ``ir/symbolic.py``) as an ``index``: index maps of kernels over dynamic shapes need sizes that
    are only known when the kernel is called (row-major strides, the end of a concat piece).
    C reads it from the kernel's ``tf_sym_<name>`` locals (``symbolic.to_c``)."""

    name = "scalar.dim"
    operands = ()
    attrs = {"dim": Attr("str")}
    traits = frozenset({PURE})

    def infer(self, types, attrs):
        from ..ir.symbolic import canonical
        expect(isinstance(attrs["dim"], str) and bool(attrs["dim"]), "dim must be a symbolic expression")
        expect(canonical(attrs["dim"]) == attrs["dim"], f"dim '{attrs['dim']}' is not in canonical form "
               f"(write '{canonical(attrs['dim'])}')")
        return [INDEX]

    def fold(self, op, constants):
        return None     # a run-time value: never a compile-time constant

    @staticmethod
    def compute(dim, env=None):
        from ..ir.symbolic import evaluate
        if env is None:
            raise ShapeError(f"scalar.dim '{dim}' needs values for its symbols")
        return np.asarray(evaluate(dim, env), dtype=np.int64)
