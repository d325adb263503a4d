"""Constants and ops whose value is known from types alone (shape_of, iota)."""
from __future__ import annotations

import numpy as np

from ...ir.opdef import CONSTANT_LIKE, PURE, SHAPE_ONLY, Attr, FusionKind, OpDef, expect, register
from ...ir.types import DType, TensorType
from .base import tensor_types


@register
class Constant(OpDef):
    """A tensor known at compile time (weights, folded values)."""

    name = "graph.constant"
    attrs = {"value": Attr("dense")}
    traits = frozenset({PURE, CONSTANT_LIKE})
    fusion = FusionKind.INJECTIVE

    def infer(self, types, attrs):
        return [attrs["value"].type]

    @staticmethod
    def compute(value):
        return value.array

    def fold(self, op, constants):
        return [op.attributes["value"].array]


@register
class ShapeOf(OpDef):
    """The operand's shape as an i64 vector; static shapes fold to a constant."""

    name = "graph.shape_of"
    operands = ("x",)
    traits = frozenset({PURE, SHAPE_ONLY})
    fusion = FusionKind.OPAQUE

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        return [TensorType((x.rank,), DType.i64)]

    @staticmethod
    def compute(x):
        return np.asarray(x.shape, dtype=np.int64)

    def fold(self, op, constants):
        t = op.operands[0].type
        if t.is_static:
            return [np.asarray(t.shape, dtype=np.int64)]
        return None


@register
class Iota(OpDef):
    """``start + step * i`` for i in [0, size): ONNX Range and torch.arange.  ``size`` may be a
    symbolic dim (``arange(seq)``), then the op is a run-time value rather than a constant."""

    name = "graph.iota"
    attrs = {"size": Attr("dim"), "start": Attr("float", 0.0), "step": Attr("float", 1.0),
             "dtype": Attr("dtype", DType.i64)}
    traits = frozenset({PURE, CONSTANT_LIKE})
    fusion = FusionKind.INJECTIVE

    def infer(self, types, attrs):
        size = attrs["size"]
        expect(not isinstance(size, int) or size >= 0, "size must be non-negative")
        return [TensorType((size,), attrs["dtype"])]

    def fold(self, op, constants):
        if not isinstance(op.attributes["size"], int):
            return None
        return super().fold(op, constants)

    @staticmethod
    def compute(size, start, step, dtype):
        if not isinstance(size, int):
            from .base import resolve_dims
            (size,) = resolve_dims((size,), "graph.iota")
        return (np.arange(size, dtype=np.float64) * step + start).astype(dtype.np)
