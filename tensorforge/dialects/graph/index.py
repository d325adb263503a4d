"""Indexing: gather, gather_elements, embedding, resize, topk, one_hot.

gather, gather_elements, embedding, resize and one_hot are INJECTIVE: each output element is
computed from input elements at positions that depend only on the output coordinate (and
the indices), so a consumer can recompute them in place; topk needs a whole row sorted
before any output is known, so it is OPAQUE.
"""
from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.rules import same_dim
from ...ir.types import Dim, DType, TensorType
from .base import (FoldStaticOnly, expect_choice, expect_float, expect_int, hint_size, io_bytes, norm_axis,
                   num_elements, tensor_types)


class Indexing(FoldStaticOnly):
    traits = frozenset({PURE})
    fusion = FusionKind.INJECTIVE

    def cost(self, operand_types, result_types, attrs):
        # Only the gathered elements of the data operand are read, not all of it.
        return Cost(0.0, io_bytes(operand_types[1:], result_types) + io_bytes((), result_types))


def _normalize_indices(idx: np.ndarray, size: int, opname: str, what: str) -> np.ndarray:
    """ONNX index rule: [-size, size) with negatives counting from the end; others are errors."""
    idx = idx.astype(np.int64, copy=False)
    bad = (idx < -size) | (idx >= size)
    if bad.any():
        raise ShapeError(f"'{opname}': {what} {int(idx[bad].flat[0])} is out of range for size {size}")
    return np.where(idx < 0, idx + size, idx)


@register
class Gather(Indexing):
    """ONNX Gather: ``out[..., i..., ...] = x[..., indices[i...], ...]`` along ``axis``."""

    name = "graph.gather"
    operands = ("x", "indices")
    attrs = {"axis": Attr("int", 0)}

    def infer(self, types, attrs):
        x, ind = tensor_types(types, self.name)
        expect_int(ind, "indices")
        expect(x.rank >= 1, "x must have rank >= 1")
        a = norm_axis(attrs["axis"], x.rank)
        return [x.with_shape(x.shape[:a] + ind.shape + x.shape[a + 1:])]

    def compute(self, x, indices, axis):
        a = axis % x.ndim
        return np.take(x, _normalize_indices(indices, x.shape[a], self.name, "index"), axis=a)


@register
class GatherElements(Indexing):
    """ONNX GatherElements: ``out[p] = x[p with p[axis] replaced by indices[p]]``; the result
    has the shape of ``indices``, which may be smaller than ``x`` on the other axes."""

    name = "graph.gather_elements"
    operands = ("x", "indices")
    attrs = {"axis": Attr("int", 0)}

    def infer(self, types, attrs):
        x, ind = tensor_types(types, self.name)
        expect_int(ind, "indices")
        expect(x.rank >= 1, "x must have rank >= 1")
        expect(ind.rank == x.rank, f"indices have rank {ind.rank}, x has rank {x.rank}; they must agree")
        a = norm_axis(attrs["axis"], x.rank)
        for i, (d, n) in enumerate(zip(x.shape, ind.shape)):
            if i != a and isinstance(d, int) and isinstance(n, int):
                expect(n <= d, f"indices axis {i} has size {n}, larger than x's {d}")
        return [x.with_shape(ind.shape)]

    def compute(self, x, indices, axis):
        a = axis % x.ndim
        window = tuple(slice(None) if i == a else slice(0, n) for i, n in enumerate(indices.shape))
        idx = _normalize_indices(indices, x.shape[a], self.name, "index")
        return np.take_along_axis(x[window], idx, axis=a)


@register
class Embedding(Indexing):
    """Rows of a (V, D) table: ``ids.shape + (D,)``.  Ids must lie in [0, V) (no negative
    wrap-around, as torch.nn.Embedding)."""

    name = "graph.embedding"
    operands = ("table", "ids")

    def infer(self, types, attrs):
        table, ids = tensor_types(types, self.name)
        expect(table.rank == 2, f"table must be (V, D), got rank {table.rank}")
        expect_int(ids, "ids")
        return [table.with_shape(ids.shape + (table.shape[1],))]

    def compute(self, table, ids):
        if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
            bad = ids[(ids < 0) | (ids >= table.shape[0])].flat[0]
            raise ShapeError(f"'{self.name}': id {int(bad)} is out of range for a table of "
                             f"{table.shape[0]} rows")
        return np.take(table, ids.astype(np.int64), axis=0)


@register
class OneHot(Indexing):
    """``out = on_value where index == k else off_value`` with the depth axis inserted at ``axis``
    (of the result).  Negative indices in [-depth, -1] count from the end; others are all off."""

    name = "graph.one_hot"
    operands = ("indices",)
    attrs = {"depth": Attr("int"), "axis": Attr("int", -1), "on_value": Attr("float", 1.0),
             "off_value": Attr("float", 0.0), "dtype": Attr("dtype", DType.f32)}

    def infer(self, types, attrs):
        (ind,) = tensor_types(types, self.name)
        expect_int(ind, "indices")
        depth = attrs["depth"]
        expect(depth >= 1, f"depth = {depth}; it must be >= 1")
        a = norm_axis(attrs["axis"], ind.rank + 1)
        return [TensorType(ind.shape[:a] + (depth,) + ind.shape[a:], attrs["dtype"])]

    @staticmethod
    def compute(indices, depth, axis, on_value, off_value, dtype):
        a = norm_axis(axis, indices.ndim + 1)
        idx = indices.astype(np.int64)
        idx = np.where(idx < 0, idx + depth, idx)
        classes = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - a))
        hot = np.expand_dims(idx, a) == classes
        return np.where(hot, on_value, off_value).astype(dtype.np)

    def cost(self, operand_types, result_types, attrs):
        return Cost(0.0, io_bytes(operand_types, result_types))


# ---- resize ------------------------------------------------------------------------------

RESIZE_MODES = ("nearest", "linear", "cubic")
COORDINATE_MODES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
                    "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinate(out: np.ndarray, in_size: int, out_size: int, mode: str,
                      precision: type = np.float32) -> np.ndarray:
    """Input coordinate of output coordinates ``out`` on one axis (ONNX
    coordinate_transformation_mode).  Computed in f32 for f32 and narrower data, as
    onnxruntime does, so that nearest rounding agrees with it on ties; f64 data gets f64."""
    f = precision
    o = np.asarray(out, dtype=f)
    scale = f(out_size) / f(in_size)
    if mode == "half_pixel":
        return (o + f(0.5)) / scale - f(0.5)
    if mode == "pytorch_half_pixel":
        return (o + f(0.5)) / scale - f(0.5) if out_size > 1 else np.zeros_like(o)
    if mode == "align_corners":
        return o * f(in_size - 1) / f(out_size - 1) if out_size > 1 else np.zeros_like(o)
    if mode == "asymmetric":
        return o / scale
    if mode == "tf_half_pixel_for_nn":
        return (o + f(0.5)) / scale
    raise ShapeError(f"unknown coordinate_transformation_mode {mode!r}")


def _nearest(x: np.ndarray, mode: str) -> np.ndarray:
    half = x.dtype.type(0.5)
    if mode == "round_prefer_floor":
        return np.ceil(x - half)
    if mode == "round_prefer_ceil":
        return np.floor(x + half)
    return np.floor(x) if mode == "floor" else np.ceil(x)


def _cubic_weights(s: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the 4 taps at offsets -1, 0, 1, 2 from floor(x)."""
    s = s.astype(np.float64)

    def near(t):        # |t| <= 1
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t):         # 1 < |t| < 2
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    return np.stack([far(s + 1), near(s), near(1 - s), far(2 - s)], axis=-1)


def resize_taps(in_size: int, out_size: int, mode: str = "nearest",
                coordinate_transformation_mode: str = "half_pixel",
                nearest_mode: str = "round_prefer_floor", cubic_coeff_a: float = -0.75,
                precision: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Output coordinate -> input taps of one resized axis: ``(indices, weights)``, each of
    shape (out_size, taps) with 1 tap (nearest), 2 (linear) or 4 (cubic);
    ``out[o] = sum_t weights[o, t] * in[indices[o, t]]``.

    Linear clamps the coordinate to [0, in-1]; cubic clamps its taps (edge replication,
    ONNX exclude_outside = 0); nearest clamps the rounded index.
    """
    x = source_coordinate(np.arange(out_size), in_size, out_size, coordinate_transformation_mode, precision)
    last = in_size - 1
    if mode == "nearest":
        idx = np.clip(_nearest(x, nearest_mode), 0, last).astype(np.int64)
        return idx[:, None], np.ones((out_size, 1))
    if mode == "linear":
        x = np.clip(x.astype(np.float64), 0, last)
        lo = np.floor(x).astype(np.int64)
        frac = x - lo
        return np.stack([lo, np.minimum(lo + 1, last)], axis=-1), np.stack([1 - frac, frac], axis=-1)
    if mode == "cubic":
        base = np.floor(x).astype(np.int64)
        idx = np.clip(base[:, None] + np.arange(-1, 3), 0, last)
        return idx, _cubic_weights(x - base, cubic_coeff_a)
    raise ShapeError(f"unknown resize mode {mode!r}")


def _precision(dtype: np.dtype) -> type:
    return np.float64 if dtype == np.float64 else np.float32


@register
class Resize(Indexing):
    """ONNX Resize to explicit ``sizes`` (the full output shape), applied separably over every
    axis whose size changes; unchanged axes are copied.  A symbolic axis cannot be resized:
    its entry in ``sizes`` must name the same symbol (so ``sizes`` has kind ``dims``)."""

    name = "graph.resize"
    operands = ("x",)
    attrs = {"sizes": Attr("dims"), "mode": Attr("str", "nearest"),
             "coordinate_transformation_mode": Attr("str", "half_pixel"),
             "nearest_mode": Attr("str", "round_prefer_floor"), "cubic_coeff_a": Attr("float", -0.75)}

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        mode = attrs["mode"]
        expect_choice(mode, RESIZE_MODES, "mode")
        expect_choice(attrs["coordinate_transformation_mode"], COORDINATE_MODES,
                      "coordinate_transformation_mode")
        expect_choice(attrs["nearest_mode"], NEAREST_MODES, "nearest_mode")
        if mode != "nearest":
            expect_float(x, f"x of a {mode} resize")
        sizes = attrs["sizes"]
        expect(len(sizes) == x.rank, f"sizes {sizes} has {len(sizes)} entries for rank {x.rank}")
        for i, (d, s) in enumerate(zip(x.shape, sizes)):
            if isinstance(d, str) or isinstance(s, str):
                expect(same_dim(d, s), f"sizes[{i}] = {s!r} but the axis has size {d!r}; a symbolic axis "
                                       f"cannot be resized, so its size must be the same symbol")
                continue
            expect(s >= 0, f"sizes[{i}] = {s} is negative")
            expect(d > 0 or s == 0, f"sizes[{i}] = {s}: axis {i} is empty and cannot be enlarged")
        return [x.with_shape(tuple(d if isinstance(d, str) else s for d, s in zip(x.shape, sizes)))]

    def compute(self, x, sizes, mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a):
        y = x if mode == "nearest" else x.astype(np.float64)
        for axis, out in enumerate(sizes):
            if isinstance(out, str) or out == x.shape[axis]:
                continue
            idx, w = resize_taps(x.shape[axis], out, mode, coordinate_transformation_mode, nearest_mode,
                                 cubic_coeff_a, _precision(x.dtype))
            if mode == "nearest":
                y = np.take(y, idx[:, 0], axis=axis)
                continue
            bshape = (-1,) + (1,) * (y.ndim - axis - 1)
            y = sum(np.take(y, idx[:, t], axis=axis) * w[:, t].reshape(bshape) for t in range(idx.shape[1]))
        return y.astype(x.dtype)

    def taps(self, op) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """``resize_taps`` of every axis of ``op`` (None where the axis keeps its size)."""
        a = op.attributes
        t = op.operands[0].type
        return [None if same_dim(s, d) else resize_taps(d, s, a["mode"], a["coordinate_transformation_mode"],
                                                a["nearest_mode"], a["cubic_coeff_a"], _precision(t.dtype.np))
                for d, s in zip(t.shape, a["sizes"])]

    def cost(self, operand_types, result_types, attrs):
        x = operand_types[0]
        taps = {"nearest": 0, "linear": 2, "cubic": 4}[attrs["mode"]]
        resized = sum(1 for d, s in zip(x.shape, attrs["sizes"]) if d != s)
        out = num_elements(result_types[0].shape)
        return Cost(2.0 * taps * resized * out, io_bytes(operand_types, result_types))


# ---- topk --------------------------------------------------------------------------------

@register
class TopK(FoldStaticOnly):
    """The ``k`` largest (or smallest) elements along ``axis`` and their i64 indices; equal
    values keep the lower index first (ONNX).  ``sorted = false`` allows any order; this
    reference returns the sorted one."""

    name = "graph.topk"
    operands = ("x",)
    results = ("values", "indices")
    attrs = {"k": Attr("int"), "axis": Attr("int", -1), "largest": Attr("bool", True),
             "sorted": Attr("bool", True)}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect(x.rank >= 1, "x must have rank >= 1")
        a = norm_axis(attrs["axis"], x.rank)
        k, d = attrs["k"], x.shape[a]
        expect(k >= 0, f"k = {k} is negative")
        expect(not isinstance(d, int) or k <= d, f"k = {k} is larger than axis {a} (size {d})")
        shape: tuple[Dim, ...] = x.shape[:a] + (k,) + x.shape[a + 1:]
        return [x.with_shape(shape), TensorType(shape, DType.i64)]

    @staticmethod
    def compute(x, k, axis, largest, sorted):
        a = axis % x.ndim
        n = x.shape[a]
        if largest:
            # Descending with ties in index order: stable-sort the reversed axis, read it backwards.
            order = (n - 1) - np.flip(np.argsort(np.flip(x, a), axis=a, kind="stable"), a)
        else:
            order = np.argsort(x, axis=a, kind="stable")
        idx = np.take(order, np.arange(k), axis=a)
        return np.take_along_axis(x, idx, axis=a), idx.astype(np.int64)

    def cost(self, operand_types, result_types, attrs):
        x = operand_types[0]
        d = x.shape[norm_axis(attrs["axis"], x.rank)]
        n = d if isinstance(d, int) else hint_size(d)
        return Cost(float(num_elements(x.shape) * max(1.0, np.log2(max(n, 2)))), io_bytes(operand_types, result_types))
