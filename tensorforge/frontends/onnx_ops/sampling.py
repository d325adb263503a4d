"""Bilinear sampling at data-dependent points: RoiAlign (``graph.roi_align``) and DeformConv
(``graph.deform_conv``, 2-D), both library kernels (``dialects/graph/sampling.py``)."""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles


@handles("RoiAlign")
def roi_align(ctx: ImportContext, node: OnnxNode) -> Value:
    x, rois, bi = node.required(0, "X"), node.required(1, "rois"), node.required(2, "batch_indices")
    mode = node.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise node.unsupported(f"mode='{mode}'")
    coord = node.attr("coordinate_transformation_mode", "half_pixel" if node.opset >= 16 else "output_half_pixel")
    if coord not in ("half_pixel", "output_half_pixel"):
        raise node.unsupported(f"coordinate_transformation_mode='{coord}'")
    shape = ctx.shape(x)
    if len(shape) != 4 or not all(isinstance(d, int) for d in shape[2:]):
        raise node.unsupported(f"X must be (N, C, H, W) with static H and W, got {x.type}")
    if ctx.dtype(rois) != ctx.dtype(x):
        rois = ctx.cast(rois, ctx.dtype(x))
    return ctx.op("roi_align", x, rois, bi, mode=mode, output_height=int(node.attr("output_height", 1)),
                  output_width=int(node.attr("output_width", 1)),
                  sampling_ratio=int(node.attr("sampling_ratio", 0)),
                  spatial_scale=float(node.attr("spatial_scale", 1.0)), half_pixel=coord == "half_pixel")


@handles("DeformConv")
def deform_conv(ctx: ImportContext, node: OnnxNode) -> Value:
    x, w, offset = node.required(0, "X"), node.required(1, "W"), node.required(2, "offset")
    b, mask = node.input(3), node.input(4)
    xs, ws = ctx.shape(x), ctx.shape(w)
    if len(xs) != 4 or len(ws) != 4:
        raise node.unsupported(f"only 2-D DeformConv (X (N, C, H, W)) is supported, got {x.type}")
    if not all(isinstance(d, int) for d in tuple(xs[1:]) + tuple(ws)):
        raise node.unsupported(f"X's channels and spatial axes and W must be static, got {x.type}, {w.type}")
    kernel = node.attr("kernel_shape", None)
    if kernel is not None and tuple(kernel) != tuple(ws[2:]):
        raise node.invalid(f"kernel_shape {tuple(kernel)} differs from W's spatial shape {tuple(ws[2:])}")
    dt = ctx.dtype(x)
    if b is None:
        b = ctx.const(np.zeros(ws[0], dt.np))
    operands = [x, w, offset, b] + ([mask] if mask is not None else [])
    operands = [v if ctx.dtype(v) == dt else ctx.cast(v, dt) for v in operands]
    return ctx.op("deform_conv", *operands, strides=tuple(node.attr("strides", None) or (1, 1)),
                  pads=tuple(node.attr("pads", None) or (0, 0, 0, 0)),
                  dilations=tuple(node.attr("dilations", None) or (1, 1)),
                  group=int(node.attr("group", 1)), offset_group=int(node.attr("offset_group", 1)))

