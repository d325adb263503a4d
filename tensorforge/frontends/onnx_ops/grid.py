"""Sampling grids: GridSample (``graph.grid_sample``) and AffineGrid (a matmul with a constant grid).

AffineGrid's output is ``theta`` applied to the homogeneous coordinates of the pixel centres
(``[x, y, (z,) 1]``, innermost axis first), which depend only on the static output size: a
constant ``(P, nsp + 1)`` matrix times ``theta`` transposed, so it lowers (and fuses) as a
matmul.
"""
from __future__ import annotations

import numpy as np

from ...ir.core import Value
from .context import ImportContext, OnnxNode
from .registry import handles

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


@handles("GridSample")
def grid_sample(ctx: ImportContext, node: OnnxNode) -> Value:
    x, grid = node.required(0), node.required(1)
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    if mode not in _MODES:
        raise node.unsupported(f"mode='{mode}'")
    padding = node.attr("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise node.unsupported(f"padding_mode='{padding}'")
    shape = ctx.shape(x)
    if len(shape) < 3 or not all(isinstance(d, int) for d in shape[2:]):
        raise node.unsupported(f"x must be (N, C, spatial...) with static spatial axes, got {x.type}")
    return ctx.op("grid_sample", x, grid, mode=_MODES[mode], padding_mode=padding,
                  align_corners=bool(node.attr("align_corners", 0)))


def _axis_coordinates(size: int, align_corners: bool) -> np.ndarray:
    """Normalised coordinates of the pixel centres of one axis (corners when ``align_corners``)."""
    i = np.arange(size, dtype=np.float64)
    if align_corners:
        return -1.0 + i * (2.0 / (size - 1)) if size > 1 else np.full(size, -1.0)
    step = 2.0 / size
    return (-1.0 + step / 2) + i * step


@handles("AffineGrid")
def affine_grid(ctx: ImportContext, node: OnnxNode) -> Value:
    theta = node.required(0)
    size = ctx.const_ints(node.required(1), "size")
    spatial = tuple(size[2:])
    nsp = len(spatial)
    if nsp not in (2, 3) or any(d <= 0 for d in spatial):
        raise node.unsupported(f"size {size}: 2-D (N, C, H, W) or 3-D (N, C, D, H, W) with positive sizes")
    tshape = ctx.shape(theta)
    if len(tshape) != 3 or tuple(tshape[1:]) != (nsp, nsp + 1):
        raise node.unsupported(f"theta must be (N, {nsp}, {nsp + 1}) for size {size}, got {theta.type}")
    align = bool(node.attr("align_corners", 0))
    axes = np.meshgrid(*[_axis_coordinates(d, align) for d in spatial], indexing="ij")
    cols = [a.reshape(-1) for a in reversed(axes)] + [np.ones(int(np.prod(spatial)))]
    base = np.stack(cols, axis=1).astype(ctx.dtype(theta).np)                 # (P, nsp + 1)
    grid = ctx.op("matmul", ctx.const(base), ctx.op("transpose", theta, perm=(0, 2, 1)))   # (N, P, nsp)
    return ctx.op("reshape", grid, shape=(tshape[0],) + spatial + (nsp,))
