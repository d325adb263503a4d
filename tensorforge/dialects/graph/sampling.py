"""Bilinear sampling at data-dependent points: ``graph.roi_align`` (ONNX RoiAlign) and
``graph.deform_conv`` (ONNX DeformConv, 2-D).

**roi_align** ``(x (N, C, H, W), rois (R, 4), batch_indices (R,)) -> (R, C, oh, ow)``.  Each roi
``[x1, y1, x2, y2]`` is scaled by ``spatial_scale`` (and shifted by -0.5 with ``half_pixel``);
without ``half_pixel`` its width and height are at least 1.  Every output bin is split into
``gh x gw`` sample points (``sampling_ratio``, or ``ceil(roi_size / out_size)`` when it is 0) at
the centres of the sub-bins.  A sample outside ``[-1, H] x [-1, W]`` contributes 0; otherwise it is
clamped at 0 from below, its low tap is ``trunc`` of it, and at the last row/column both taps
and the coordinate collapse onto it.  ``avg`` averages the bilinear values over the samples
(divided by ``max(gh * gw, 1)``); ``max`` takes, as onnxruntime and ONNX's reference do, the max
over the samples of the max of the four *weighted* taps ``w_k * x[tap_k]``.

**deform_conv** ``(x (N, C, H, W), w (OC, C / group, kh, kw), offset (N, og * kh * kw * 2, oh, ow),
b (OC,), mask? (N, og * kh * kw, oh, ow)) -> (N, OC, oh, ow)``: a convolution whose taps read
``x`` at ``(i * sh - ph0 + ki * dh + dy, j * sw - pw0 + kj * dw + dx)`` (``dy, dx`` from ``offset``
of the channel's offset group, ``offset_group`` groups of ``C / og`` channels) by bilinear
interpolation, taps outside the image reading 0, each sampled value scaled by ``mask``.

The taps depend on operand *values* and serve every channel, so both ops lower to library
kernels (hand-written C, ``codegen/c/library_kernels.py``) like ``graph.grid_sample``.  The
arithmetic is float64 in both the reference below and the C.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.rules import same_dim
from ...ir.types import TensorType
from .base import FoldStaticOnly, expect_choice, expect_float, expect_int, io_bytes, num_elements, spatial_ints, \
    tensor_types

ROI_MODES = ("avg", "max")


def roi_align_samples(roi, scale: float, half_pixel: bool, oh: int, ow: int, ratio: int, height: int, width: int):
    """(pos (oh, ow, gh, gw, 4) int64, weight (oh, ow, gh, gw, 4) f64, count) of one roi."""
    off = 0.5 if half_pixel else 0.0
    x1, y1, x2, y2 = (float(v) * scale - off for v in roi)
    rw, rh = x2 - x1, y2 - y1
    if not half_pixel:
        rw, rh = max(rw, 1.0), max(rh, 1.0)
    bh, bw = rh / oh, rw / ow
    gh = ratio if ratio > 0 else int(math.ceil(rh / oh))
    gw = ratio if ratio > 0 else int(math.ceil(rw / ow))
    gh, gw = max(gh, 0), max(gw, 0)
    count = max(gh * gw, 1)
    yy = y1 + np.arange(oh)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / max(gh, 1)   # (oh, gh)
    xx = x1 + np.arange(ow)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / max(gw, 1)   # (ow, gw)
    y = np.broadcast_to(yy[:, None, :, None], (oh, ow, gh, gw)).astype(np.float64)
    x = np.broadcast_to(xx[None, :, None, :], (oh, ow, gh, gw)).astype(np.float64)
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.maximum(y, 0.0), np.maximum(x, 0.0)
    ylo, xlo = np.trunc(y).astype(np.int64), np.trunc(x).astype(np.int64)
    ylast, xlast = ylo >= height - 1, xlo >= width - 1
    ylo = np.where(ylast, height - 1, ylo)
    xlo = np.where(xlast, width - 1, xlo)
    yhi = np.where(ylast, ylo, ylo + 1)
    xhi = np.where(xlast, xlo, xlo + 1)
    y = np.where(ylast, ylo, y)
    x = np.where(xlast, xlo, x)
    ly, lx = y - ylo, x - xlo
    hy, hx = 1.0 - ly, 1.0 - lx
    pos = np.stack([ylo * width + xlo, ylo * width + xhi, yhi * width + xlo, yhi * width + xhi], axis=-1)
    wt = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], axis=-1)
    pos = np.where(outside[..., None], 0, pos)
    wt = np.where(outside[..., None], 0.0, wt)
    return pos, wt, count


@register
class RoiAlign(FoldStaticOnly):
    name = "graph.roi_align"
    operands = ("x", "rois", "batch_indices")
    attrs = {"mode": Attr("str", "avg", "avg | max"),
             "output_height": Attr("int", 1),
             "output_width": Attr("int", 1),
             "sampling_ratio": Attr("int", 0, "samples per bin and axis; 0: ceil(roi size / output size)"),
             "spatial_scale": Attr("float", 1.0),
             "half_pixel": Attr("bool", True, "half_pixel (else output_half_pixel) coordinates")}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True            # lowered to hand-written C (passes/lower/graph_to_kernels.py)

    def infer(self, types, attrs):
        x, rois, bi = tensor_types(types, self.name)
        expect_choice(attrs["mode"], ROI_MODES, "mode")
        expect(attrs["output_height"] >= 1 and attrs["output_width"] >= 1,
               f"output_height/output_width must be >= 1, got {attrs['output_height']}, {attrs['output_width']}")
        expect(attrs["sampling_ratio"] >= 0, f"sampling_ratio must be >= 0, got {attrs['sampling_ratio']}")
        expect_float(x, "x")
        expect_float(rois, "rois")
        expect_int(bi, "batch_indices")
        expect(x.rank == 4, f"x must be (N, C, H, W), got {x.shape}")
        expect(rois.rank == 2 and same_dim(rois.shape[1], 4), f"rois must be (R, 4), got {rois.shape}")
        expect(bi.rank == 1 and same_dim(bi.shape[0], rois.shape[0]),
               f"batch_indices must be (R,) with R = {rois.shape[0]}, got {bi.shape}")
        for d in x.shape[2:]:
            expect(isinstance(d, int), f"x's spatial axes must be static, got {x.shape}")
        return [x.with_shape((rois.shape[0], x.shape[1], attrs["output_height"], attrs["output_width"]))]

    def compute(self, x, rois, batch_indices, mode, output_height, output_width, sampling_ratio, spatial_scale,
                half_pixel):
        n, c, h, w = x.shape
        out = np.zeros((rois.shape[0], c, output_height, output_width))
        xf = x.astype(np.float64).reshape(n, c, h * w)
        for r in range(rois.shape[0]):
            pos, wt, count = roi_align_samples(rois[r], float(spatial_scale), bool(half_pixel), output_height,
                                               output_width, sampling_ratio, h, w)
            if pos.shape[2] * pos.shape[3] == 0:
                continue
            b = int(batch_indices[r])
            vals = xf[b][:, pos] * wt[None]                       # (C, oh, ow, gh, gw, 4)
            if mode == "avg":
                out[r] = vals.sum(axis=(3, 4, 5)) / count
            else:
                out[r] = vals.max(axis=5).max(axis=(3, 4))
        return out.astype(x.dtype)

    def cost(self, operand_types, result_types, attrs):
        return Cost(8.0 * num_elements(result_types[0].shape), io_bytes(operand_types, result_types))


def deform_conv_geometry(x_shape, w_shape, attrs) -> tuple[tuple[int, ...], ...]:
    """(strides, pads, dilations, output (oh, ow)) of a 2-D deform_conv."""
    strides = spatial_ints(attrs, "strides", 2, 1, 1)
    pads = spatial_ints(attrs, "pads", 4, 0, 0)
    dil = spatial_ints(attrs, "dilations", 2, 1, 1)
    out = []
    for a in range(2):
        k = (w_shape[2 + a] - 1) * dil[a] + 1
        out.append((x_shape[2 + a] + pads[a] + pads[2 + a] - k) // strides[a] + 1)
    return strides, pads, dil, tuple(out)


def deform_conv_columns(x, offset, mask, kernel, strides, pads, dil, offset_group):
    """The sampled (and masked) inputs ``cols (N, C, kh, kw, oh, ow)`` of deform_conv, in f64."""
    n, c, h, w = x.shape
    kh, kw = kernel
    oh, ow = offset.shape[2:]
    cg = c // offset_group
    off = offset.astype(np.float64).reshape(n, offset_group, kh, kw, 2, oh, ow)
    msk = None if mask is None else mask.astype(np.float64).reshape(n, offset_group, kh, kw, oh, ow)
    base_y = (np.arange(oh) * strides[0] - pads[0])[None, None, :, None] + (np.arange(kh) * dil[0])[:, None, None, None]
    base_x = (np.arange(ow) * strides[1] - pads[1])[None, None, None, :] + (np.arange(kw) * dil[1])[None, :, None, None]
    xf = x.astype(np.float64).reshape(n, c, h * w)
    cols = np.zeros((n, c, kh, kw, oh, ow))
    for b in range(n):
        for g in range(offset_group):
            py = base_y + off[b, g, :, :, 0]                      # (kh, kw, oh, ow)
            px = base_x + off[b, g, :, :, 1]
            y0, x0 = np.floor(py), np.floor(px)
            ly, lx = py - y0, px - x0
            y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
            acc = np.zeros((cg,) + py.shape)
            for yi, wy in ((y0, 1.0 - ly), (y0 + 1, ly)):
                for xi, wx in ((x0, 1.0 - lx), (x0 + 1, lx)):
                    ok = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
                    lin = np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)
                    acc += xf[b, g * cg:(g + 1) * cg][:, lin] * np.where(ok, wy * wx, 0.0)[None]
            if msk is not None:
                acc *= msk[b, g][None]
            cols[b, g * cg:(g + 1) * cg] = acc
    return cols


@register
class DeformConv(FoldStaticOnly):
    name = "graph.deform_conv"
    operands = ("x", "w", "offset", "b", "mask?")
    attrs = {"strides": Attr("ints", ()), "pads": Attr("ints", ()), "dilations": Attr("ints", ()),
             "group": Attr("int", 1), "offset_group": Attr("int", 1)}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True            # lowered to hand-written C (passes/lower/graph_to_kernels.py)

    def infer(self, types, attrs):
        tt = tensor_types(types, self.name)
        x, w, offset, b = tt[:4]
        mask = tt[4] if len(tt) == 5 else None
        for t, what in ((x, "x"), (w, "w"), (offset, "offset"), (b, "b")) + (((mask, "mask"),) if mask else ()):
            expect_float(t, what)
        expect(x.rank == 4 and w.rank == 4, f"deform_conv is 2-D: x (N, C, H, W) and w (OC, C/group, kh, kw), "
                                            f"got {x.shape} and {w.shape}")
        for d in tuple(x.shape[1:]) + tuple(w.shape):
            expect(isinstance(d, int), f"x's channels and spatial axes and w must be static, got {x.shape}, {w.shape}")
        group, og = attrs["group"], attrs["offset_group"]
        expect(group >= 1 and og >= 1, f"group and offset_group must be >= 1, got {group}, {og}")
        c, oc = x.shape[1], w.shape[0]
        expect(c == w.shape[1] * group and oc % group == 0,
               f"x has {c} channels, w {w.shape} with group {group}: need C = w.shape[1] * group, OC % group == 0")
        expect(c % og == 0, f"channels {c} are not divisible by offset_group {og}")
        strides, pads, dil, out = deform_conv_geometry(x.shape, w.shape, attrs)
        expect(all(o >= 1 for o in out), f"empty output {out}")
        kk = w.shape[2] * w.shape[3]
        expect(offset.rank == 4 and same_dim(offset.shape[0], x.shape[0]) and same_dim(offset.shape[1], og * kk * 2)
               and tuple(offset.shape[2:]) == out,
               f"offset must be (N, {og * kk * 2}, {out[0]}, {out[1]}), got {offset.shape}")
        expect(b.rank == 1 and same_dim(b.shape[0], oc), f"b must be ({oc},), got {b.shape}")
        if mask is not None:
            expect(mask.rank == 4 and same_dim(mask.shape[0], x.shape[0]) and same_dim(mask.shape[1], og * kk)
                   and tuple(mask.shape[2:]) == out, f"mask must be (N, {og * kk}, {out[0]}, {out[1]}), got {mask.shape}")
        return [TensorType((x.shape[0], oc) + out, x.dtype)]

    def compute(self, x, w, offset, b, mask=None, strides=(), pads=(), dilations=(), group=1, offset_group=1):
        at = {"strides": strides, "pads": pads, "dilations": dilations}
        st, pd, dl, (oh, ow) = deform_conv_geometry(x.shape, w.shape, at)
        cols = deform_conv_columns(x, offset, mask, w.shape[2:], st, pd, dl, offset_group)
        n, c = x.shape[:2]
        oc = w.shape[0]
        icg, ocg = c // group, oc // group
        wf = w.astype(np.float64)
        out = np.zeros((n, oc, oh, ow)) + b.astype(np.float64)[None, :, None, None]
        for g in range(group):
            out[:, g * ocg:(g + 1) * ocg] += np.einsum("ockl,nckluv->nouv", wf[g * ocg:(g + 1) * ocg],
                                                       cols[:, g * icg:(g + 1) * icg])
        return out.astype(x.dtype)

    def cost(self, operand_types, result_types, attrs):
        w, y = operand_types[1], result_types[0]
        macs = num_elements(y.shape) * num_elements(w.shape[1:])
        return Cost(2.0 * macs + 8.0 * macs, io_bytes(operand_types, result_types))
