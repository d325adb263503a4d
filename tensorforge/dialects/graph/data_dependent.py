"""Ops whose output size depends on the input *values*: nonzero, compress, unique, NMS.

Their result types hold a fresh symbol (the ``count`` attribute, named by the importer) that no
input binds: its value is known only once the op has run.  The symbol's upper bound is a dim of
the inputs (``count_bound``): a native build sizes the result's buffer at that bound, the op
computes the true count at run time, downstream kernels run over the runtime extent and the
returned array has the true shape (docs/dynamic_shapes.md, "Data-dependent sizes").  The
reference interpreter binds the symbol from the array the op produced.
"""
from __future__ import annotations

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.symbolic import dim_prod
from ...ir.types import Dim, DType, TensorType
from .base import io_bytes, norm_axis, tensor_types

DATA_DEPENDENT_OPS = frozenset({"graph.nonzero", "graph.compress", "graph.unique", "graph.non_max_suppression"})


class DataDependent(OpDef):
    """Never folded here (the folder's array would fix the count), never fused."""

    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE

    def fold(self, op, constants):
        return None

    def cost(self, operand_types, result_types, attrs):
        return Cost(float(sum(t.num_elements for t in operand_types)), io_bytes(operand_types, result_types))


def count_bound(op) -> Dim:
    """The largest value the op's ``count`` symbol can take, as a dim of its operands."""
    x = op.operands[0].type
    name = op.name
    if name == "graph.nonzero":
        return dim_prod(x.shape) if x.rank else 1
    if name in ("graph.compress", "graph.unique"):
        axis = op.attributes.get("axis")
        if axis is None:
            return dim_prod(x.shape)
        return x.shape[norm_axis(axis, x.rank)]
    # NMS: every (batch, class, box) triple at most, capped by max_output_boxes_per_class (a value)
    boxes, scores = op.operands[0].type, op.operands[1].type
    return dim_prod([scores.shape[0], scores.shape[1], boxes.shape[1]])


def declare_count_symbols(func) -> list[str]:
    """Records the ``count`` symbol of every data-dependent op of ``func`` in its symbol table
    (``tf.symbols``) as ``SymbolRange(count, lo=0, hi=<largest bound>, hint=<bound's hint>,
    bound=count_bound(op))``, so that memory plans and output allocation size the result at its
    bound and the runtime knows that no input binds it.  Ops in program order, so a bound may read
    the count of an earlier op.  Idempotent; returns the symbols declared now."""
    from ...ir.symbolic import SymbolRange, set_symbol_table, symbol_table_of
    table = symbol_table_of(func)
    added: list[str] = []
    for op in func.body:
        if op.name not in DATA_DEPENDENT_OPS:
            continue
        name = op.attributes["count"]
        if name in table.ranges:
            continue
        bound = count_bound(op)
        hi = table.upper_bound(bound)
        table.add(SymbolRange(name, lo=0, hi=hi, hint=max(0, table.hint(bound)), bound=bound))
        added.append(name)
    if added:
        set_symbol_table(func, table)
    return added


@register
class NonZero(DataDependent):
    """ONNX NonZero: the i64 coordinates (one row per axis) of the non-zero elements, row-major."""

    name = "graph.nonzero"
    operands = ("x",)
    attrs = {"count": Attr("str")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        return [TensorType((max(x.rank, 1), attrs["count"]), DType.i64)]

    @staticmethod
    def compute(x, count):
        x = np.asarray(x)
        if x.ndim == 0:
            x = x.reshape(1)
        return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@register
class Compress(DataDependent):
    """ONNX Compress: the slices along ``axis`` (the flattened input when None) where ``condition``
    is true; a condition shorter than the axis drops the rest."""

    name = "graph.compress"
    operands = ("x", "condition")
    attrs = {"axis": Attr("int", None), "count": Attr("str")}

    def infer(self, types, attrs):
        x, cond = tensor_types(types, self.name)
        expect(cond.rank == 1, f"condition must be 1-D, got rank {cond.rank}")
        if attrs.get("axis") is None:
            return [x.with_shape((attrs["count"],))]
        a = norm_axis(attrs.get("axis"), x.rank)
        return [x.with_shape(x.shape[:a] + (attrs["count"],) + x.shape[a + 1:])]

    @staticmethod
    def compute(x, condition, count, axis=None):
        cond = np.asarray(condition).astype(bool)
        if axis is None:
            flat = np.asarray(x).reshape(-1)
            return flat[:cond.size][cond[:flat.size]]
        a = axis % x.ndim
        n = min(cond.size, x.shape[a])
        return np.take(x, np.nonzero(cond[:n])[0], axis=a)


@register
class Unique(DataDependent):
    """ONNX Unique: distinct values (or slices along ``axis``), the index of each one's first
    occurrence, every element's position in the result, and how often each occurs; sorted
    ascending, or in order of first occurrence when ``sorted`` is false."""

    name = "graph.unique"
    operands = ("x",)
    results = ("y", "indices", "inverse_indices", "counts")
    attrs = {"axis": Attr("int", None), "sorted": Attr("bool", True), "count": Attr("str")}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        c = attrs["count"]
        if attrs.get("axis") is None:
            y, n = x.with_shape((c,)), dim_prod(x.shape)
        else:
            a = norm_axis(attrs.get("axis"), x.rank)
            y, n = x.with_shape(x.shape[:a] + (c,) + x.shape[a + 1:]), x.shape[a]
        return [y, TensorType((c,), DType.i64), TensorType((n,), DType.i64), TensorType((c,), DType.i64)]

    @staticmethod
    def compute(x, count, axis=None, sorted=True):
        x = np.asarray(x)
        if axis is None:
            y, idx, inv, cnt = np.unique(x.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
        else:
            y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                         axis=axis % x.ndim)
        inv = inv.reshape(-1)
        if not sorted:
            order = np.argsort(idx, kind="stable")          # by first occurrence
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if axis is None else axis % x.ndim)
            idx, cnt, inv = idx[order], cnt[order], rank[inv]
        return y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)


@register
class NonMaxSuppression(DataDependent):
    """ONNX NonMaxSuppression: per batch and class, boxes in descending score order, each kept
    when its score exceeds ``score_threshold`` and its IoU with every kept box is at most
    ``iou_threshold``, at most ``max_output_boxes_per_class`` of them; rows of (batch, class,
    box).  The three scalar operands are values (they may be model inputs)."""

    name = "graph.non_max_suppression"
    operands = ("boxes", "scores", "max_output_boxes_per_class", "iou_threshold", "score_threshold")
    attrs = {"center_point_box": Attr("bool", False), "count": Attr("str")}

    def infer(self, types, attrs):
        boxes, scores = tensor_types(types[:2], self.name)
        expect(boxes.rank == 3 and boxes.shape[2] == 4, f"boxes must be [batch, boxes, 4], got {boxes}")
        expect(scores.rank == 3, f"scores must be [batch, classes, boxes], got {scores}")
        return [TensorType((attrs["count"], 3), DType.i64)]

    @staticmethod
    def compute(boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold,
                center_point_box, count):
        limit = int(np.asarray(max_output_boxes_per_class).reshape(-1)[0]) \
            if np.asarray(max_output_boxes_per_class).size else 0
        iou_t = float(np.asarray(iou_threshold).reshape(-1)[0]) if np.asarray(iou_threshold).size else 0.0
        score_t = np.asarray(score_threshold).reshape(-1)
        score_t = float(score_t[0]) if score_t.size else None
        corners = _corners(np.asarray(boxes, dtype=np.float64), center_point_box)
        rows: list[tuple[int, int, int]] = []
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                rows.extend((b, c, i) for i in _select(corners[b], np.asarray(scores[b, c], np.float64),
                                                       limit, iou_t, score_t))
        return np.array(rows, dtype=np.int64).reshape(-1, 3)


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """(y1, x1, y2, x2) with y1 <= y2, x1 <= x2, from either box encoding."""
    if center:
        xc, yc, w, h = (boxes[..., k] for k in range(4))
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = (boxes[..., k] for k in range(4))
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    h = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    w = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = h * w
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _select(corners: np.ndarray, scores: np.ndarray, limit: int, iou_t: float, score_t: float | None) -> list[int]:
    if limit <= 0:
        return []
    order = np.argsort(-scores, kind="stable")
    kept: list[int] = []
    for i in order:
        if score_t is not None and not scores[i] > score_t:
            continue
        if all(_iou(corners[i], corners[k]) <= iou_t for k in kept):
            kept.append(int(i))
            if len(kept) == limit:
                break
    return kept
