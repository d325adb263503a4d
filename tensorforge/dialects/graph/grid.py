"""Sampling at data-dependent coordinates: ``graph.grid_sample`` (ONNX GridSample, 2-D and N-D).

``out[n, c, o...] = interpolate(x[n, c], coordinate(grid[n, o...]))``: the grid's last axis holds
normalised coordinates in [-1, 1], innermost spatial axis first (x, y[, z]).  Per spatial axis of
size D the coordinate is denormalised (``(g + 1) / 2 * (D - 1)`` with ``align_corners``, else
``((g + 1) * D - 1) / 2``), rounded half to even for ``nearest``, and when it lies outside the
border ([0, D-1] with align_corners, else [-0.5, D-0.5]) clamped into [0, D-1] (``border``) or
reflected at the border (``reflection``).  The taps (1, 2 or 4 per axis: nearest, linear, Keys'
cubic with a = -0.75) read ``x`` with the padding rule applied again per tap index: 0 outside
(``zeros``), the clamped index (``border``) or the reflected one (``reflection``).  The
coordinate arithmetic runs in the data's precision (f32 for f32 and narrower), as ONNX's
reference does, so that nearest rounding agrees with it; the interpolation in f64.

The taps of an output position depend on grid *values*, and one position's coordinate, taps and
weights serve every channel: the op lowers to a library kernel (hand-written C,
``codegen/c/library_kernels.py``) that computes them once per position and loops over channels,
instead of a tensor expression that would recompute them for each channel.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ir.opdef import PURE, Attr, Cost, FusionKind, expect, register
from ...ir.rules import same_dim
from .base import FoldStaticOnly, expect_choice, expect_float, io_bytes, num_elements, tensor_types

GRID_MODES = ("nearest", "linear", "cubic")
GRID_PADDING = ("zeros", "border", "reflection")
CUBIC_A = -0.75


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflects ``x`` at the borders ``lo``/``hi`` until it lies between them."""
    rng = hi - lo
    if rng <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, np.where(above, x - hi, 0))
    n = np.trunc(dx / rng)
    r = dx - n * rng
    even = (n % 2) == 0
    from_lo, from_hi = lo + r, hi - r
    out = np.where(below, np.where(even, from_lo, from_hi), x)
    return np.where(above, np.where(even, from_hi, from_lo), out)


def _keys(s: np.ndarray) -> list[np.ndarray]:
    a = CUBIC_A

    def near(t):
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t):
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    return [far(s + 1), near(s), near(1 - s), far(2 - s)]


def grid_axis_taps(g: np.ndarray, size: int, mode: str, padding_mode: str, align_corners: bool,
                   precision: type) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(index, weight, valid) of every tap of one spatial axis, for normalised coordinates ``g``."""
    f = precision
    g = g.astype(f)
    if align_corners:
        x = (g + f(1)) / f(2) * f(size - 1)
        lo, hi = 0.0, size - 1.0
    else:
        x = ((g + f(1)) * f(size) - f(1)) / f(2)
        lo, hi = -0.5, size - 0.5
    if mode == "nearest":
        x = np.rint(x)
    outside = (x < lo) | (x > hi)
    if padding_mode == "border":
        x = np.where(outside, np.clip(x, 0, size - 1), x)
    elif padding_mode == "reflection":
        x = np.where(outside, _reflect(x.astype(np.float64), lo, hi).astype(f), x)   # f64, as the reference
    x = x.astype(np.float64)
    if mode == "nearest":
        taps = [(np.trunc(x), np.ones_like(x))]
    else:
        base = np.floor(x)
        s = x - base
        if mode == "linear":
            taps = [(base, 1 - s), (base + 1, s)]
        else:
            taps = [(base + t, w) for t, w in zip((-1, 0, 1, 2), _keys(s))]
    out = []
    for i, w in taps:
        i = i.astype(np.int64)
        valid = np.ones(i.shape, bool)
        if padding_mode == "zeros":
            valid = (i >= 0) & (i < size)
        elif padding_mode == "reflection":
            i = np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64)
        out.append((np.clip(i, 0, size - 1), w, valid))
    return out


@register
class GridSample(FoldStaticOnly):
    name = "graph.grid_sample"
    operands = ("x", "grid")
    attrs = {"mode": Attr("str", "linear", "nearest | linear | cubic"),
             "padding_mode": Attr("str", "zeros", "zeros | border | reflection"),
             "align_corners": Attr("bool", False)}
    traits = frozenset({PURE})
    fusion = FusionKind.OPAQUE
    library_kernel = True            # lowered to hand-written C (passes/lower/graph_to_kernels.py)

    def infer(self, types, attrs):
        x, grid = tensor_types(types, self.name)
        expect_choice(attrs["mode"], GRID_MODES, "mode")
        expect_choice(attrs["padding_mode"], GRID_PADDING, "padding_mode")
        expect_float(x, "x")
        expect_float(grid, "grid")
        expect(x.rank >= 3, f"x must be (N, C, spatial...), got rank {x.rank}")
        nsp = x.rank - 2
        expect(grid.rank == nsp + 2, f"grid must have rank {nsp + 2} for {nsp} spatial axes, got {grid.rank}")
        expect(same_dim(grid.shape[-1], nsp), f"grid's last axis must be {nsp}, got {grid.shape[-1]}")
        expect(same_dim(grid.shape[0], x.shape[0]), f"grid batch {grid.shape[0]} differs from x's {x.shape[0]}")
        for d in x.shape[2:]:
            expect(isinstance(d, int), f"x's spatial axes must be static, got {x.shape}")
        return [x.with_shape((x.shape[0], x.shape[1]) + tuple(grid.shape[1:-1]))]

    def compute(self, x, grid, mode, padding_mode, align_corners):
        n, c = x.shape[:2]
        spatial = x.shape[2:]
        nsp = len(spatial)
        out_sp = grid.shape[1:-1]
        prec = np.float64 if x.dtype == np.float64 else np.float32
        g = grid.reshape(n, -1, nsp)
        # grid's last axis is innermost-first: entry k belongs to spatial axis nsp-1-k
        axes = [grid_axis_taps(g[:, :, nsp - 1 - a], spatial[a], mode, padding_mode, align_corners, prec)
                for a in range(nsp)]
        xf = x.astype(np.float64).reshape(n, c, -1)
        bidx = np.arange(n)[:, None]
        total = np.zeros((n, c, g.shape[1]))
        for combo in itertools.product(*axes):
            lin = np.zeros(g.shape[1:2], np.int64)[None] + np.zeros((n, 1), np.int64)
            w = np.ones(lin.shape)
            for a, (i, wa, ok) in enumerate(combo):
                lin = lin * spatial[a] + i
                w = w * np.where(ok, wa, 0.0)
            vals = xf[bidx, :, lin]                       # (n, P, c)
            total += np.moveaxis(vals, -1, 1) * w[:, None, :]
        return total.reshape((n, c) + tuple(out_sp)).astype(x.dtype)

    def cost(self, operand_types, result_types, attrs):
        nsp = operand_types[0].rank - 2
        taps = {"nearest": 1, "linear": 2, "cubic": 4}[attrs["mode"]] ** nsp
        return Cost(2.0 * taps * num_elements(result_types[0].shape), io_bytes(operand_types, result_types))
