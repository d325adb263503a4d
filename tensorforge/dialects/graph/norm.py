"""Normalisations: layer, batch (inference form), group and instance norm.

Each result has the shape and element type of ``x``.  Statistics are computed in at
least f32 with a two-pass variance (mean first, then the mean of squared deviations),
which stays accurate when the mean is large compared with the spread.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...ir.opdef import PURE, SAME_SHAPE, Attr, FusionKind, OpDef, expect, register
from ...ir.types import TensorType
from .base import broadcasts_to, compute_dtype, expect_float, match_dims, norm_axis, promote, tensor_types


def normalize(x: np.ndarray, axes: Sequence[int], epsilon: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon)`` with statistics over ``axes``."""
    x = x.astype(compute_dtype(x.dtype), copy=False)
    centred = x - np.mean(x, axis=tuple(axes), keepdims=True)
    var = np.mean(np.square(centred), axis=tuple(axes), keepdims=True)
    return centred / np.sqrt(var + x.dtype.type(epsilon))


def per_channel(v: np.ndarray, rank: int) -> np.ndarray:
    """A (C,) vector shaped to broadcast along axis 1 of a rank-``rank`` tensor."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


class Norm(OpDef):
    """Shared: a float ``x`` whose shape the result keeps, and per-channel parameter checks."""

    operands = ("x",)
    traits = frozenset({PURE, SAME_SHAPE})
    fusion = FusionKind.REDUCTION
    flops = 8.0          # mean, centre, square, mean, rsqrt, scale, shift: per element
    min_rank = 2

    def check_x(self, types) -> list[TensorType]:
        tt = tensor_types(types, self.name)
        x = tt[0]
        expect_float(x, "x")
        expect(x.rank >= self.min_rank, f"x must have rank >= {self.min_rank} (N, C, ...), got shape {x.shape}")
        for t in tt[1:]:
            promote(x.dtype, t.dtype)
        return tt

    def check_channel_params(self, tt: Sequence[TensorType]) -> None:
        x = tt[0]
        for name, t in zip(self.operands[1:], tt[1:]):
            expect(t.rank == 1, f"{name} must be a vector of the {x.shape[1]} channels, got shape {t.shape}")
            match_dims(t.shape[0], x.shape[1], f"{name} has {t.shape[0]} values but x has {x.shape[1]} channels "
                                               f"(dim 1)")


@register
class LayerNorm(Norm):
    """Normalises over axes [axis, rank), then ``* scale + bias`` (each broadcast to those axes).

    The optional operands are positional: a bias without a scale needs a scale of ones.
    """

    name = "graph.layer_norm"
    operands = ("x", "scale?", "bias?")
    attrs = {"axis": Attr("int", -1), "epsilon": Attr("float", 1e-5)}
    min_rank = 1

    def infer(self, types, attrs):
        tt = self.check_x(types)
        x = tt[0]
        axis = norm_axis(attrs.get("axis", -1), x.rank)
        normalized = x.shape[axis:]
        for name, t in zip(("scale", "bias"), tt[1:]):
            expect(broadcasts_to(t.shape, normalized),
                   f"{name} of shape {t.shape} does not broadcast to the normalised shape {normalized} "
                   f"(dims {axis}..{x.rank - 1} of x)")
        return [x]

    @staticmethod
    def compute(x, scale=None, bias=None, axis=-1, epsilon=1e-5):
        y = normalize(x, range(axis % x.ndim, x.ndim), epsilon)
        if scale is not None:
            y = y * scale.astype(y.dtype, copy=False)
        if bias is not None:
            y = y + bias.astype(y.dtype, copy=False)
        return y


@register
class BatchNorm(Norm):
    """Inference batch norm on channel axis 1 with stored statistics.

    It reduces nothing: per channel it is ``x * a + b``, so it fuses like a broadcast op
    (BROADCAST, not REDUCTION, unlike the other norms)."""

    name = "graph.batch_norm"
    operands = ("x", "scale", "bias", "mean", "var")
    attrs = {"epsilon": Attr("float", 1e-5)}
    fusion = FusionKind.BROADCAST
    flops = 2.0

    def infer(self, types, attrs):
        tt = self.check_x(types)
        self.check_channel_params(tt)
        return [tt[0]]

    @staticmethod
    def compute(x, scale, bias, mean, var, epsilon=1e-5):
        dt = compute_dtype(x.dtype)
        a = scale.astype(dt) / np.sqrt(var.astype(dt) + dt.type(epsilon))
        b = bias.astype(dt) - mean.astype(dt) * a
        return x.astype(dt, copy=False) * per_channel(a, x.ndim) + per_channel(b, x.ndim)


@register
class GroupNorm(Norm):
    """Normalises each of ``num_groups`` channel groups over (its channels, spatial axes),
    then a per-channel ``* scale + bias``."""

    name = "graph.group_norm"
    operands = ("x", "scale", "bias")
    attrs = {"num_groups": Attr("int"), "epsilon": Attr("float", 1e-5)}

    def infer(self, types, attrs):
        tt = self.check_x(types)
        self.check_channel_params(tt)
        x, groups = tt[0], attrs["num_groups"]
        expect(groups >= 1, f"num_groups must be >= 1, got {groups}")
        expect(isinstance(x.shape[1], str) or x.shape[1] % groups == 0,
               f"channels (dim 1 of x) = {x.shape[1]} are not divisible by num_groups = {groups}")
        return [x]

    @staticmethod
    def compute(x, scale, bias, num_groups, epsilon=1e-5):
        n = x.shape[0]
        y = normalize(x.reshape(n, num_groups, -1), (2,), epsilon).reshape(x.shape)
        return y * per_channel(scale.astype(y.dtype), x.ndim) + per_channel(bias.astype(y.dtype), x.ndim)


@register
class InstanceNorm(Norm):
    """Normalises each (sample, channel) over the spatial axes, then ``* scale + bias``."""

    name = "graph.instance_norm"
    operands = ("x", "scale", "bias")
    attrs = {"epsilon": Attr("float", 1e-5)}
    min_rank = 3

    def infer(self, types, attrs):
        tt = self.check_x(types)
        self.check_channel_params(tt)
        return [tt[0]]

    @staticmethod
    def compute(x, scale, bias, epsilon=1e-5):
        y = normalize(x, range(2, x.ndim), epsilon)
        return y * per_channel(scale.astype(y.dtype), x.ndim) + per_channel(bias.astype(y.dtype), x.ndim)
