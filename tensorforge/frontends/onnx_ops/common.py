"""Helpers shared by the handler modules: axes, operands that moved from attributes to inputs."""
from __future__ import annotations

import math
from typing import Sequence

from ...ir.types import Dim
from .context import ImportContext, OnnxNode


def norm_axis(node: OnnxNode, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise node.unsupported(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def norm_axes(node: OnnxNode, axes: Sequence[int], rank: int, what: str = "axes") -> tuple[int, ...]:
    return tuple(norm_axis(node, a, rank, what) for a in axes)


def ints_operand(ctx: ImportContext, node: OnnxNode, index: int, attr: str, since: int, what: str,
                 default=None) -> tuple[int, ...] | None:
    """An int list that is attribute ``attr`` before opset ``since`` and input ``index`` from it on."""
    if node.opset < since:
        value = node.attr(attr, default)
        return None if value is None else tuple(int(v) for v in (value if isinstance(value, tuple) else (value,)))
    v = node.input(index)
    if v is None:
        return default
    return ctx.const_ints(v, what)


def prod(dims: Sequence[Dim]) -> int:
    return math.prod(int(d) for d in dims)


def is_static(dims: Sequence[Dim]) -> bool:
    return all(isinstance(d, int) for d in dims)


def spatial_auto_pads(node: OnnxNode, auto_pad: str, in_sizes: Sequence[int], kernel: Sequence[int],
                      strides: Sequence[int], dilations: Sequence[int]) -> tuple[int, ...] | None:
    """Explicit (begin..., end...) pads for ``auto_pad`` SAME_UPPER/SAME_LOWER/VALID; None for NOTSET."""
    if auto_pad in ("NOTSET", ""):
        return None
    n = len(kernel)
    if auto_pad == "VALID":
        return (0,) * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.unsupported(f"auto_pad='{auto_pad}'")
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        if not isinstance(size, int):
            raise node.unsupported(f"auto_pad='{auto_pad}' needs static spatial dimensions")
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else big)
        ends.append(big if auto_pad == "SAME_UPPER" else small)
    return tuple(begins + ends)
