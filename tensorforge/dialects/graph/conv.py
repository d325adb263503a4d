"""Convolution (1-3 spatial dims, groups, dilation, asymmetric pads) and ONNX ConvTranspose.

The references are built for whole-model interpretation (ResNet-50 in about a second):
conv is im2col through a strided view plus one batched GEMM per group (depthwise conv, whose
GEMMs would be degenerate, is a multiply-add per kernel offset instead); conv_transpose is
one GEMM followed by a col2im scatter-add per kernel offset.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, OpDef, expect, register
from ...ir.symbolic import dim_add, dim_mul, dim_sub
from ...ir.types import TensorType
from .base import (Window, compute_dtype, expect_numeric, io_bytes, match_dims, num_elements, pad_spatial,
                   promote, spatial_ints, tensor_types, window_view)

_WINDOW_ATTRS = {"strides": Attr("ints", (), "per spatial axis; () = all 1"),
                 "pads": Attr("ints", (), "(begin..., end...); () = all 0"),
                 "dilations": Attr("ints", (), "per spatial axis; () = all 1"),
                 "groups": Attr("int", 1)}


class ConvBase(OpDef):
    """Operand checks shared by conv and conv_transpose: ``x (N, C, *S)``, a weight with the
    same rank and an optional bias of the output channel count."""

    operands = ("x", "w", "b?")
    traits = frozenset({PURE})
    fusion = FusionKind.OUT_ELEMENTWISE_FUSABLE

    def check_attrs(self, nspatial: int, attrs: dict[str, Any]) -> None:
        """Attribute rules that need only the spatial rank (also run by ``verify``)."""
        groups = attrs.get("groups", 1)
        expect(groups >= 1, f"groups must be >= 1, got {groups}")
        for key, count, fill, low in (("strides", nspatial, 1, 1), ("dilations", nspatial, 1, 1),
                                      ("pads", 2 * nspatial, 0, 0)):
            spatial_ints(attrs, key, count, fill, low)

    def operand_types(self, types) -> tuple[TensorType, TensorType, TensorType | None]:
        tt = tensor_types(types, self.name)
        x, w = tt[0], tt[1]
        promote(x.dtype, w.dtype)
        expect_numeric(x, "x")
        expect(3 <= x.rank <= 5, f"x must be (N, C, *spatial) with 1-3 spatial dims, got shape {x.shape}")
        expect(w.rank == x.rank, f"w must have rank {x.rank} like x, got shape {w.shape}")
        for i, k in enumerate(w.shape[2:]):
            expect(isinstance(k, int) and k >= 1, f"kernel dim {i + 2} of w must be a static size >= 1, got {k}")
        return x, w, (tt[2] if len(tt) == 3 else None)

    def check_bias(self, b: TensorType | None, x: TensorType, channels) -> None:
        if b is not None:
            promote(x.dtype, b.dtype)
            expect(b.rank == 1, f"b must be a vector of {channels} output channels, got shape {b.shape}")
            match_dims(b.shape[0], channels, "b must have one value per output channel")

    def verify(self, op) -> None:
        self.check_attrs(op.operands[0].type.rank - 2, op.attributes)


@register
class Conv(ConvBase):
    """ONNX Conv: ``y[n, o] = b[o] + sum over the group's input channels and kernel of x * w``."""

    name = "graph.conv"
    attrs = dict(_WINDOW_ATTRS)

    def infer(self, types, attrs):
        x, w, b = self.operand_types(types)
        self.check_attrs(x.rank - 2, attrs)
        groups = attrs.get("groups", 1)
        out_ch, c_per_group = w.shape[0], w.shape[1]
        if isinstance(x.shape[1], int) and isinstance(c_per_group, int):
            expect(x.shape[1] % groups == 0, f"input channels (dim 1 of x) = {x.shape[1]} are not divisible "
                                             f"by groups = {groups}")
            expect(x.shape[1] == c_per_group * groups,
                   f"channel dim 1: x has {x.shape[1]} channels but w expects "
                   f"{c_per_group} per group x {groups} groups = {c_per_group * groups}")
        if isinstance(out_ch, int):
            expect(out_ch % groups == 0, f"output channels (dim 0 of w) = {out_ch} are not divisible by "
                                         f"groups = {groups}")
        self.check_bias(b, x, out_ch)
        win = Window(w.shape[2:], attrs)
        spatial = tuple(win.out_dim(i, s) for i, s in enumerate(x.shape[2:]))
        return [TensorType((x.shape[0], out_ch) + spatial, x.dtype)]

    @staticmethod
    def compute(x, w, b=None, strides=(), pads=(), dilations=(), groups=1):
        return conv_nd(x, w, b, Window(w.shape[2:], {"strides": strides, "pads": pads,
                                                     "dilations": dilations}), groups)

    def cost(self, operand_types, result_types, attrs):
        w, y = operand_types[1], result_types[0]
        macs = num_elements(y.shape) * num_elements(w.shape[1:])     # w.shape[1] is C / groups
        bias = num_elements(y.shape) if len(operand_types) == 3 else 0
        return Cost(2.0 * macs + bias, io_bytes(operand_types, result_types))


@register
class ConvTranspose(ConvBase):
    """ONNX ConvTranspose with explicit pads: the adjoint of conv, w is (C, O/groups, *K).

    Output size per axis: ``stride*(in-1) + output_padding + dilation*(k-1) + 1 - pads``.
    """

    name = "graph.conv_transpose"
    attrs = dict(_WINDOW_ATTRS, output_padding=Attr("ints", (), "per spatial axis, added at the end; () = all 0"))

    def check_attrs(self, nspatial, attrs):
        super().check_attrs(nspatial, attrs)
        extra = spatial_ints(attrs, "output_padding", nspatial, 0, 0)
        strides = spatial_ints(attrs, "strides", nspatial, 1, 1)
        dilations = spatial_ints(attrs, "dilations", nspatial, 1, 1)
        for i, (e, s, d) in enumerate(zip(extra, strides, dilations)):
            expect(e < max(s, d), f"output_padding[{i}] = {e} must be smaller than the stride ({s}) "
                                  f"or the dilation ({d})")

    def infer(self, types, attrs):
        x, w, b = self.operand_types(types)
        self.check_attrs(x.rank - 2, attrs)
        groups = attrs.get("groups", 1)
        match_dims(x.shape[1], w.shape[0], "channel dim 1 of x must equal dim 0 of w")
        if isinstance(w.shape[0], int):
            expect(w.shape[0] % groups == 0, f"input channels (dim 0 of w) = {w.shape[0]} are not divisible "
                                             f"by groups = {groups}")
        out_ch = dim_mul(w.shape[1], groups)
        self.check_bias(b, x, out_ch)
        win = Window(w.shape[2:], attrs)
        extra = spatial_ints(attrs, "output_padding", x.rank - 2, 0, 0)
        spatial = tuple(_transposed_dim(win, i, s, extra[i]) for i, s in enumerate(x.shape[2:]))
        return [TensorType((x.shape[0], out_ch) + spatial, x.dtype)]

    @staticmethod
    def compute(x, w, b=None, strides=(), pads=(), dilations=(), output_padding=(), groups=1):
        win = Window(w.shape[2:], {"strides": strides, "pads": pads, "dilations": dilations})
        return conv_transpose_nd(x, w, b, win, tuple(output_padding) or (0,) * (x.ndim - 2), groups)

    def cost(self, operand_types, result_types, attrs):
        x, w, y = operand_types[0], operand_types[1], result_types[0]
        macs = num_elements(x.shape) * num_elements(w.shape[1:])
        bias = num_elements(y.shape) if len(operand_types) == 3 else 0
        return Cost(2.0 * macs + bias, io_bytes(operand_types, result_types))


def _transposed_dim(win: Window, i: int, size, extra: int):
    ext, s = win.extents[i], win.strides[i]
    pads = win.pads_begin[i] + win.pads_end[i]
    if isinstance(size, str):
        return dim_add(dim_mul(s, dim_sub(size, 1)), extra + ext - pads)
    out = s * (size - 1) + extra + ext - pads
    expect(out >= 1, f"spatial axis {i}: output size {out} is not positive (input {size}, stride {s}, "
                     f"extent {ext}, pads {win.pads_begin[i]}+{win.pads_end[i]}, output_padding {extra})")
    return out


def _add_bias(y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is not None:
        y += b.astype(y.dtype, copy=False).reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


def conv_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Window, groups: int) -> np.ndarray:
    """Grouped N-d convolution as im2col: for each group, (Og, Cg*K) @ (Cg*K, out pixels)."""
    dt = compute_dtype(x.dtype)
    x, w = x.astype(dt, copy=False), w.astype(dt, copy=False)
    n, c = x.shape[:2]
    o, d = w.shape[0], x.ndim - 2
    cg, og = c // groups, o // groups
    out = tuple(int(win.out_dim(i, s)) for i, s in enumerate(x.shape[2:]))
    pixels = math.prod(out)
    xp = pad_spatial(x, win.pads_begin, win.pads_end)
    view = window_view(xp, win, out)                        # (N, C, *out, *K)
    if cg == 1:
        return _add_bias(_depthwise(view, w, out), b)
    view = view.reshape((n, groups, cg) + out + win.kernel)
    # (N, G, Cg, *K, *out) -> (N, G, Cg*K, P): the only copy, the im2col matrix.
    order = (0, 1, 2) + tuple(range(3 + d, 3 + 2 * d)) + tuple(range(3, 3 + d))
    cols = view.transpose(order).reshape(n, groups, cg * math.prod(win.kernel), pixels)
    wg = w.reshape(groups, og, cg * math.prod(win.kernel))  # (G, Og, Cg*K); explicit: Og may be 0
    y = np.matmul(wg, cols)                                # (N, G, Og, P)
    return _add_bias(y.reshape((n, o) + out), b)


def _depthwise(view: np.ndarray, w: np.ndarray, out: tuple[int, ...]) -> np.ndarray:
    """One input channel per group: a multiply-add per kernel offset beats im2col, whose
    GEMMs would be (Og x K) @ (K x P) with tiny K, one per channel."""
    n, c = view.shape[:2]
    og = w.shape[0] // c
    wk = w.reshape(c, og, math.prod(w.shape[2:]))
    bcast = (1, c, og) + (1,) * len(out)
    y = np.zeros((n, c, og) + out, dtype=w.dtype)
    for i, offset in enumerate(np.ndindex(*w.shape[2:])):
        y += view[(Ellipsis,) + offset][:, :, None] * wk[:, :, i].reshape(bcast)
    return y.reshape((n, c * og) + out)


def conv_transpose_nd(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, win: Window,
                      output_padding: Sequence[int], groups: int) -> np.ndarray:
    """Transposed convolution: one GEMM gives every (kernel offset, input pixel) product, then
    each kernel offset is scatter-added into a strided slice of the uncropped output."""
    dt = compute_dtype(x.dtype)
    x, w = x.astype(dt, copy=False), w.astype(dt, copy=False)
    n, c = x.shape[:2]
    spatial, kernel = x.shape[2:], w.shape[2:]
    cg, og = c // groups, w.shape[1]
    xg = x.reshape(n, groups, cg, math.prod(spatial))
    wg = w.reshape(groups, cg, og * math.prod(kernel)).transpose(0, 2, 1)     # (G, Og*K, Cg)
    cols = np.matmul(wg, xg).reshape((n, groups, og) + kernel + spatial)    # (N, G, Og, *K, *S)
    full_size = tuple(s * (i - 1) + e + ext for s, i, e, ext in
                      zip(win.strides, spatial, output_padding, win.extents))
    full = np.zeros((n, groups, og) + full_size, dtype=dt)
    # an empty input axis scatters nothing (the output is the bias alone): its slices'
    # ``s * (i - 1) + 1`` stop would be negative there, which NumPy reads from the end
    for offset in np.ndindex(*kernel) if all(spatial) else ():
        dst = tuple(slice(k * dl, k * dl + s * (i - 1) + 1, s)
                    for k, dl, s, i in zip(offset, win.dilations, win.strides, spatial))
        full[(Ellipsis,) + dst] += cols[(slice(None),) * 3 + offset]
    crop = tuple(slice(pb, size - pe) for pb, pe, size in zip(win.pads_begin, win.pads_end, full_size))
    out = tuple(size - pb - pe for pb, pe, size in zip(win.pads_begin, win.pads_end, full_size))
    y = full[(Ellipsis,) + crop].reshape((n, groups * og) + out)
    return _add_bias(np.ascontiguousarray(y), b)
