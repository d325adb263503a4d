"""Pooling over the spatial axes of (N, C, *spatial): windowed max/avg and the global forms.

ONNX semantics: in ceil mode a last window that would start in the end padding is
dropped; the windows that run past the padded input see nothing there (it neither wins a
max nor counts in an average); ``count_include_pad`` counts the explicit pads only.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.types import TensorType
from .base import (Window, compute_dtype, expect_float, expect_numeric, io_bytes, mean, num_elements, pad_spatial,
                   tensor_types, window_view)


class WindowPool(OpDef):
    """A reduction over each kernel window; subclasses give the reduction."""

    operands = ("x",)
    traits = frozenset({PURE})
    fusion = FusionKind.REDUCTION
    has_dilations = True

    def window(self, nspatial: int, attrs: dict[str, Any]) -> Window:
        """The checked window (also run by ``verify``)."""
        kernel = tuple(attrs["kernel"])
        expect(len(kernel) == nspatial, f"kernel has {len(kernel)} values but x has {nspatial} spatial dims")
        expect(all(k >= 1 for k in kernel), f"kernel = {kernel}: every value must be >= 1")
        win = Window(kernel, attrs, dilations=self.has_dilations)
        for i, (b, e, k) in enumerate(zip(win.pads_begin, win.pads_end, kernel)):
            expect(b < k and e < k, f"pads on spatial axis {i} ({b}, {e}) must be smaller than the kernel ({k})")
        return win

    def check_input(self, x: TensorType) -> None:
        expect_numeric(x, "x")

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        self.check_input(x)
        expect(x.rank >= 3, f"x must be (N, C, *spatial) with at least one spatial dim, got shape {x.shape}")
        win = self.window(x.rank - 2, attrs)
        ceil = attrs.get("ceil_mode", False)
        spatial = tuple(win.out_dim(i, s, ceil) for i, s in enumerate(x.shape[2:]))
        return [TensorType(x.shape[:2] + spatial, x.dtype)]

    def verify(self, op) -> None:
        self.window(op.operands[0].type.rank - 2, op.attributes)

    def cost(self, operand_types, result_types, attrs):
        flops = num_elements(result_types[0].shape) * num_elements(attrs["kernel"])
        return Cost(float(flops), io_bytes(operand_types, result_types))


def _pooled(x: np.ndarray, win: Window, ceil_mode: bool, fill,
            reduce: Callable[..., np.ndarray]) -> tuple[np.ndarray, tuple[int, ...]]:
    """``reduce`` over every window of ``x`` padded with ``fill`` (also past the end, where
    ceil mode needs it); returns the reduction and the padding added past the explicit pads."""
    d = len(win.kernel)
    out = tuple(int(win.out_dim(i, s, ceil_mode)) for i, s in enumerate(x.shape[-d:]))
    over = tuple(max(0, (o - 1) * s + ext - (n + b + e)) for o, s, ext, n, b, e in
                 zip(out, win.strides, win.extents, x.shape[-d:], win.pads_begin, win.pads_end))
    xp = pad_spatial(x, win.pads_begin, tuple(e + v for e, v in zip(win.pads_end, over)), fill)
    return reduce(window_view(xp, win, out), axis=tuple(range(-d, 0))), over


def _native_max_pool(op) -> bool:
    """Whether a max pool runs as hand-written C (``codegen/c/library_kernels.py``): 2-D, float32
    (or 8-bit, a quantized model's), static, no dilation.  The generic loop kernel checks every tap against the padding and gcc
    leaves its strided reads scalar: ResNet-18's 3x3/2 pool took 7% of the network."""
    x = op.operands[0].type
    dil = tuple(op.attributes.get("dilations", ()) or ())
    return (x.rank == 4 and x.dtype.name in ("f32", "u8", "i8") and all(isinstance(d, int) for d in x.shape)
            and all(d == 1 for d in dil) and all(isinstance(d, int) and d > 0 for d in op.results[0].type.shape))


@register
class MaxPool(WindowPool):
    """Max over each window; padding never wins (it is the type's lowest value)."""

    name = "graph.max_pool"
    library_kernel_if = staticmethod(_native_max_pool)   # lowered to hand-written C when it holds
    attrs = {"kernel": Attr("ints"), "strides": Attr("ints", ()), "pads": Attr("ints", ()),
             "dilations": Attr("ints", ()), "ceil_mode": Attr("bool", False)}

    @staticmethod
    def compute(x, kernel, strides=(), pads=(), dilations=(), ceil_mode=False):
        win = Window(kernel, {"strides": strides, "pads": pads, "dilations": dilations})
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return _pooled(x, win, ceil_mode, low, np.max)[0]


@register
class AvgPool(WindowPool):
    """Mean over each window; the divisor counts input elements, plus the explicit pads when
    ``count_include_pad`` (never the ceil-mode overhang)."""

    name = "graph.avg_pool"
    attrs = {"kernel": Attr("ints"), "strides": Attr("ints", ()), "pads": Attr("ints", ()),
             "ceil_mode": Attr("bool", False), "count_include_pad": Attr("bool", False)}
    has_dilations = False

    def check_input(self, x):
        expect_float(x, "x")

    @staticmethod
    def compute(x, kernel, strides=(), pads=(), ceil_mode=False, count_include_pad=False):
        win = Window(kernel, {"strides": strides, "pads": pads})
        dt = compute_dtype(x.dtype)
        sums, over = _pooled(x.astype(dt, copy=False), win, ceil_mode, 0, np.sum)
        # The divisor: the same pooling over a map of what counts (1) and what does not (0).
        d = len(kernel)
        counted = np.ones(x.shape[-d:], dtype=dt)
        if count_include_pad:
            counted = pad_spatial(counted, win.pads_begin, win.pads_end, 1)
            counted = pad_spatial(counted, (0,) * d, over, 0)
            counts, _ = _pooled(counted, Window(kernel, {"strides": strides}), False, 0, np.sum)
        else:
            counts, _ = _pooled(counted, win, ceil_mode, 0, np.sum)
        return sums / counts


class GlobalPool(OpDef):
    """A reduction over every spatial axis that keeps the rank: (N, C, 1, ..., 1)."""

    operands = ("x",)
    traits = frozenset({PURE})
    fusion = FusionKind.REDUCTION

    def infer(self, types, attrs):
        (x,) = tensor_types(types, self.name)
        expect_numeric(x, "x")
        expect(x.rank >= 3, f"x must be (N, C, *spatial) with at least one spatial dim, got shape {x.shape}")
        return [TensorType(x.shape[:2] + (1,) * (x.rank - 2), x.dtype)]

    def cost(self, operand_types, result_types, attrs):
        return Cost(float(num_elements(operand_types[0].shape)), io_bytes(operand_types, result_types))


@register
class GlobalAvgPool(GlobalPool):
    name = "graph.global_avg_pool"

    def infer(self, types, attrs):
        expect_float(tensor_types(types, self.name)[0], "x")
        return super().infer(types, attrs)

    @staticmethod
    def compute(x):
        axes = tuple(range(2, x.ndim))
        return mean(x, axes, keepdims=True, dtype=compute_dtype(x.dtype))


@register
class GlobalMaxPool(GlobalPool):
    name = "graph.global_max_pool"

    @staticmethod
    def compute(x):
        # an empty spatial extent gives the type's lowest value (-inf), as the native reduction
        # does, rather than NumPy's error for a max over nothing
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        return np.max(x, axis=tuple(range(2, x.ndim)), keepdims=True, initial=low)
