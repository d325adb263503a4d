"""Reductions over axes, arg-reductions, softmax/log_softmax and cumulative sums."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...ir.opdef import PURE, SAME_SHAPE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.types import DType, TensorType
from .base import (compute_dtype, expect_float, expect_numeric, io_bytes, mean, norm_axes, norm_axis, num_elements,
                   tensor_types)


def reduced_shape(shape: Sequence, axes: Sequence[int], keepdims: bool) -> tuple:
    """``shape`` with ``axes`` (normalised) removed, or set to 1 when ``keepdims``."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class Reduction(OpDef):
    """Shared by the ops that read every input element once and write fewer: one flop per read."""

    operands = ("x",)
    traits = frozenset({PURE})
    fusion = FusionKind.REDUCTION
    flops_per_input = 1.0

    def cost(self, operand_types, result_types, attrs):
        return Cost(self.flops_per_input * num_elements(operand_types[0].shape), io_bytes(operand_types, result_types))


class AxesReduction(Reduction):
    """``reduce(x, axes, keepdims)``; an empty ``axes`` reduces every axis."""

    attrs = {"axes": Attr("ints", (), "() reduces all axes"), "keepdims": Attr("bool", False)}
    reducer: Callable[..., np.ndarray] = staticmethod(np.sum)
    needs_nonempty = False      # max/min have no identity element
    bool_ok = False             # max/min of booleans are any/all

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        if not self.bool_ok:
            expect_numeric(x, "x")
        axes = norm_axes(attrs.get("axes", ()), x.rank) or tuple(range(x.rank))
        if self.needs_nonempty:
            for i in axes:
                expect(x.shape[i] != 0, f"cannot reduce the empty axis {i} (no identity element)")
        return [TensorType(reduced_shape(x.shape, axes, attrs.get("keepdims", False)), x.dtype)]

    def compute(self, x, axes=(), keepdims=False):
        axes = tuple(a % x.ndim for a in axes) or tuple(range(x.ndim))
        return self.reducer(x, axes, keepdims)


def _float_acc(fn):
    """Sums/products of half floats accumulate in f32; integers keep their type."""
    def run(x, axes, keepdims):
        return fn(x, axis=axes, keepdims=keepdims, dtype=compute_dtype(x.dtype))
    return run


def _mean(x, axes, keepdims):
    return mean(x, axes, keepdims, dtype=compute_dtype(x.dtype) if x.dtype.kind == "f" else np.float64)


def _define_reduction(opname: str, reducer, extremum: bool = False, doc: str = ""):
    cls = type(opname.title().replace("_", ""), (AxesReduction,),
               {"name": f"graph.{opname}", "reducer": staticmethod(reducer), "needs_nonempty": extremum,
                "bool_ok": extremum,
                "doc": doc or f"{opname} over ``axes``.", "__module__": __name__})
    return register(cls)


_define_reduction("reduce_sum", _float_acc(np.sum))
_define_reduction("reduce_mean", _mean, doc="Mean over ``axes`` (integer means truncate toward zero).")
_define_reduction("reduce_max", lambda x, a, k: np.max(x, axis=a, keepdims=k), extremum=True)
_define_reduction("reduce_min", lambda x, a, k: np.min(x, axis=a, keepdims=k), extremum=True)
_define_reduction("reduce_prod", _float_acc(np.prod))


class ArgReduction(Reduction):
    """Index (i64) of the extreme value along ``axis``; ties go to the first index, or the
    last one with ``select_last_index``."""

    attrs = {"axis": Attr("int", 0), "keepdims": Attr("bool", False), "select_last_index": Attr("bool", False)}
    pick: Callable[..., np.ndarray] = staticmethod(np.argmax)

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect(x.rank >= 1, "x must have rank >= 1")
        axis = norm_axis(attrs.get("axis", 0), x.rank)
        expect(x.shape[axis] != 0, f"cannot take the {self.name[6:]} of the empty axis {axis}")
        return [TensorType(reduced_shape(x.shape, (axis,), attrs.get("keepdims", False)), DType.i64)]

    def compute(self, x, axis=0, keepdims=False, select_last_index=False):
        axis %= x.ndim
        if select_last_index:
            idx = x.shape[axis] - 1 - self.pick(np.flip(x, axis), axis=axis, keepdims=keepdims)
        else:
            idx = self.pick(x, axis=axis, keepdims=keepdims)
        return idx.astype(np.int64)


@register
class ArgMax(ArgReduction):
    name = "graph.argmax"
    pick = staticmethod(np.argmax)


@register
class ArgMin(ArgReduction):
    name = "graph.argmin"
    pick = staticmethod(np.argmin)


class SoftmaxBase(OpDef):
    """Normalised exponentials along ``axis``, shifted by the maximum so exp never overflows."""

    operands = ("x",)
    attrs = {"axis": Attr("int", -1)}
    traits = frozenset({PURE, SAME_SHAPE})
    fusion = FusionKind.REDUCTION
    flops = 5.0      # max, subtract, exp (counted once), sum, divide: per element

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect_float(x, "x")
        expect(x.rank >= 1, "x must have rank >= 1")
        norm_axis(attrs.get("axis", -1), x.rank)
        return [x]


def log_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(compute_dtype(x.dtype), copy=False)
    if x.size == 0:            # nothing to normalise (np.max has no identity)
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = x.astype(compute_dtype(x.dtype), copy=False)
    if x.size == 0:            # nothing to normalise (np.max has no identity)
        return x.copy()
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


@register
class Softmax(SoftmaxBase):
    name = "graph.softmax"

    @staticmethod
    def compute(x, axis=-1):
        return softmax(x, axis)


@register
class LogSoftmax(SoftmaxBase):
    name = "graph.log_softmax"

    @staticmethod
    def compute(x, axis=-1):
        return log_softmax(x, axis)


@register
class CumSum(OpDef):
    """Running sum along ``axis``; ``exclusive`` leaves out the element itself, ``reverse``
    sums from the end.  A scan is not a reduction kernel, so it fuses with nothing."""

    name = "graph.cumsum"
    operands = ("x",)
    attrs = {"axis": Attr("int"), "exclusive": Attr("bool", False), "reverse": Attr("bool", False)}
    traits = frozenset({PURE, SAME_SHAPE})
    fusion = FusionKind.OPAQUE
    flops = 1.0

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect_numeric(x, "x")
        expect(x.rank >= 1, "x must have rank >= 1")
        norm_axis(attrs["axis"], x.rank)
        return [x]

    @staticmethod
    def compute(x, axis, exclusive=False, reverse=False):
        axis %= x.ndim
        y = np.flip(x, axis) if reverse else x
        total = np.cumsum(y, axis=axis, dtype=compute_dtype(x.dtype))
        if exclusive:
            moved = np.moveaxis(total, axis, 0)
            shifted = np.zeros_like(moved)
            shifted[1:] = moved[:-1]
            total = np.moveaxis(shifted, 0, axis)
        return np.flip(total, axis) if reverse else total
