"""Building blocks shared by graph op definitions: broadcasting, axis handling, base classes."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import ShapeError
from ...ir.opdef import (COMMUTATIVE, ELEMENTWISE, PURE, SAME_SHAPE, Attr, FusionKind, OpDef, expect)
from ...ir.types import Dim, DType, TensorType, Type


def tensor_types(types: Sequence[Type], opname: str) -> list[TensorType]:
    for i, t in enumerate(types):
        if not isinstance(t, TensorType):
            raise ShapeError(f"operand #{i} must be a tensor, got {t}")
    return list(types)  # type: ignore[return-value]


def broadcast_dims(a: Dim, b: Dim) -> Dim:
    """NumPy broadcasting of one dimension, with named symbolic dims."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, str) and isinstance(b, int):
        return b          # the symbol must equal b at run time (or be 1)
    if isinstance(b, str) and isinstance(a, int):
        return a
    if isinstance(a, str) and isinstance(b, str):
        return a
    raise ShapeError(f"dimensions {a} and {b} cannot broadcast")


def broadcast_shapes(*shapes: Sequence[Dim]) -> tuple:
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = [1] * rank
    for s in shapes:
        pad = [1] * (rank - len(s)) + list(s)
        for i, d in enumerate(pad):
            try:
                out[i] = broadcast_dims(out[i], d)
            except ShapeError:
                raise ShapeError(f"shapes {', '.join(str(tuple(x)) for x in shapes)} do not broadcast") from None
    return tuple(out)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """Negative axes count from the end, as in NumPy; out-of-range axes are shape errors."""
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(axes: Sequence[int], rank: int) -> tuple[int, ...]:
    out = tuple(sorted(norm_axis(a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return out


def promote(a: DType, b: DType) -> DType:
    """Binary ops require equal element types (frontends insert casts), as in ONNX/StableHLO."""
    if a is not b:
        raise ShapeError(f"element types differ: {a} and {b} (insert a graph.cast)")
    return a


class UnaryElementwise(OpDef):
    """``out = f(x)`` element by element; same shape and element type as ``x``."""

    operands = ("x",)
    traits = frozenset({PURE, ELEMENTWISE, SAME_SHAPE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1.0
    float_only = False

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect(not self.float_only or x.dtype.is_float, f"needs a floating-point operand, got {x.dtype}")
        return [x]


class BinaryElementwise(OpDef):
    """``out = f(lhs, rhs)`` with NumPy broadcasting; both operands share one element type."""

    operands = ("lhs", "rhs")
    traits = frozenset({PURE, ELEMENTWISE})
    fusion = FusionKind.ELEMENTWISE
    flops = 1.0
    result_dtype: DType | None = None   # set for comparisons (bool results)

    def infer(self, types, attrs):
        a, b = tensor_types(types, self.name)
        dtype = promote(a.dtype, b.dtype)
        return [TensorType(broadcast_shapes(a.shape, b.shape), self.result_dtype or dtype)]


class CommutativeBinary(BinaryElementwise):
    traits = frozenset({PURE, ELEMENTWISE, COMMUTATIVE})


def as_np_dtype(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return x.astype(like.dtype, copy=False)


__all__ = [
    "Attr", "BinaryElementwise", "CommutativeBinary", "DType", "FusionKind", "OpDef", "PURE",
    "ELEMENTWISE", "SAME_SHAPE", "COMMUTATIVE", "TensorType", "UnaryElementwise", "broadcast_dims",
    "broadcast_shapes", "expect", "norm_axis", "norm_axes", "promote", "tensor_types", "Any",
]
