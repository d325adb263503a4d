"""Window trimming (``trim-window``): kernel taps that only ever read padding are removed.

A convolution or pooling over a tiny feature map (a 3x3 conv with pad 1 over a 1x1 map, a
stride-2 3x3 pad-1 conv over a 2x2 map, ...) has taps that read padding for *every* output
position.  The generic loop nest still visits them (``sum += (inside ? x : 0) * w``); under
``-ffast-math`` gcc folds ``0 * w`` away, under IEEE it must not (``0 * inf`` is NaN), so such
kernels run 5-20x slower than they need to.  This pass cuts those taps out of the op itself.

Per spatial axis with input size ``H``, output size ``O``, stride ``s``, dilation ``d``, pads
``(pb, pe)`` and kernel ``K``, tap ``k`` reads positions ``o*s - pb + k*d`` for ``o`` in
``0..O-1``.  Leading taps ``0..lo-1`` and trailing taps ``hi+1..K-1`` that read only positions
outside ``[0, H)`` go; the new kernel is taps ``lo..hi`` with pads ``pb - lo*d`` and
``pe - (K-1-hi)*d`` (less any end padding no window reads any more).  Each retained tap reads exactly the positions it read before (the shift of
the first tap is taken off the begin pad), so the op computes the same values over the same
windows; a side whose new pad would be negative is left alone, and every rewrite is checked to
give exactly the old result type (shape inference of the new op).

- **conv** (``graph.conv``, 1-3 spatial dims, any groups and dilation; the bias is kept as it
  is): only when the weight is a constant and every *dropped* weight is finite.  A dropped tap
  multiplies a padding zero, so with a finite weight its product is exactly ``+0`` or ``-0``.
  Adding ``+-0`` to an IEEE sum (round to nearest) changes it only when the sum is ``-0`` and
  the addend ``+0``; and a sum started at ``+0`` is never ``-0``: ``a + b`` is ``-0`` only when
  both are ``-0`` (an exact cancellation ``x + (-x)`` gives ``+0``, and a nonzero sum is never
  rounded to zero).  The accumulator starts at ``+0`` in the reference (im2col GEMM) and in the
  lowering (the bias is an epilogue, ``bias_epilogue`` in ``to_structured/conv.py``), so removing
  the dropped products changes no bit of the result, signed zeros included.  (An accumulator
  started at the bias would keep that property for any bias but ``-0``.)  An infinite or NaN
  weight in a dropped tap makes that product NaN in the original, so then the axis is not
  trimmed.  ``graph.conv_transpose`` is not handled.
- **max_pool**: padding never wins a max (it is the type's lowest value and the NaN-aware max
  keeps a NaN against it), so trimming taps that see only padding is always exact.
- **avg_pool** with ``count_include_pad`` false: padding is neither summed nor counted, so the
  same holds.  With ``count_include_pad`` true the divisor counts the pads, which trimming
  would change, so those are left alone.

Ceil mode is allowed: positions past the end pad (the ceil-mode overhang) are treated like
padding by both pooling ops, and a rewrite whose output shape would differ is refused.
Symbolic spatial sizes are never trimmed.  The pass runs after ``fold-inference`` in the
default pipeline, so that BatchNorm-folded conv weights are already constants.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...ir.core import Operation
from ...ir.pass_manager import Option
from ...ir.rewrite import Pattern, PatternRewriter, RewriteStats, apply_patterns_greedily, constant_value, pattern
from ..registry import register_pass
from .fold_inference import NewConst, _infer, _replace_with
from .simplify import _GreedyPass


def _reads_input(tap: int, size: int, out: int, stride: int, dilation: int, pad_begin: int) -> bool:
    """Whether kernel tap ``tap`` reads a position in ``[0, size)`` for some output ``o < out``."""
    first = tap * dilation - pad_begin
    if first >= size:
        return False
    if first >= 0:
        return True
    o = (-first + stride - 1) // stride          # the first output whose read is >= 0
    return o < out and first + o * stride < size


def trim_axis(size: Any, out: Any, kernel: int, stride: int, dilation: int, pad_begin: int,
              pad_end: int) -> tuple[int, int, int, int] | None:
    """``(lo, hi, new_pad_begin, new_pad_end)``: the taps to keep on one spatial axis (``lo..hi``
    inclusive) and the pads that go with them, or None when nothing can be trimmed (a symbolic
    size, no padding, no tap that reads only padding, or a new pad that would be negative).
    Leading and trailing taps are trimmed independently.  The end pad also loses what no window
    reads any more (``(out-1)*stride + extent`` is all the padded axis needs), so a stride-2 3x3
    pad-1 window over 2 becomes a 2-tap window with no pads."""
    if not isinstance(size, int) or not isinstance(out, int) or (pad_begin == 0 and pad_end == 0):
        return None
    reads = [_reads_input(k, size, out, stride, dilation, pad_begin) for k in range(kernel)]
    if not any(reads):
        return None              # every tap reads only padding: leave such a degenerate op alone
    lo = reads.index(True)
    hi = kernel - 1 - reads[::-1].index(True)
    if pad_begin - lo * dilation < 0:
        lo = 0
    if pad_end - (kernel - 1 - hi) * dilation < 0:
        hi = kernel - 1
    if (lo, hi) == (0, kernel - 1):
        return None
    pb = pad_begin - lo * dilation
    pe = pad_end - (kernel - 1 - hi) * dilation
    extent = (hi - lo) * dilation + 1
    pe = max(0, min(pe, (out - 1) * stride + extent - size - pb))
    return lo, hi, pb, pe


def _window_attrs(op: Operation, nspatial: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads_begin, pads_end) of ``op``, defaults filled in."""
    a = op.attributes
    strides = list(a.get("strides") or (1,) * nspatial)
    dilations = list(a.get("dilations") or (1,) * nspatial)
    pads = list(a.get("pads") or (0,) * (2 * nspatial))
    return strides, dilations, pads[:nspatial], pads[nspatial:]


def _with_window(op: Operation, kernel: list[int] | None, pb: list[int], pe: list[int]) -> dict[str, Any]:
    attrs = dict(op.attributes)
    attrs["pads"] = tuple(pb) + tuple(pe)
    if kernel is not None:
        attrs["kernel"] = tuple(kernel)
    return attrs


@pattern("graph.conv", name="trim-conv-window")
def trim_conv_window(op: Operation, rewriter: PatternRewriter) -> bool:
    x, wv = op.operands[0], op.operands[1]
    w = constant_value(wv)
    out = op.results[0].type
    if w is None or x.type.rank != w.ndim:
        return False
    nspatial = x.type.rank - 2
    strides, dilations, pb, pe = _window_attrs(op, nspatial)
    kernel = list(w.shape[2:])
    keep = [slice(None)] * w.ndim
    changed = False
    for i in range(nspatial):
        found = trim_axis(x.type.shape[2 + i], out.shape[2 + i], kernel[i], strides[i], dilations[i], pb[i], pe[i])
        if found is None:
            continue
        lo, hi, new_b, new_e = found
        axis = 2 + i
        current = w[tuple(keep)]
        dropped = np.delete(current, np.arange(lo, hi + 1), axis=axis)
        try:
            finite = bool(np.isfinite(np.asarray(dropped, np.float64)).all())
        except (TypeError, ValueError):
            finite = False
        if not finite:
            continue                    # 0 * inf or 0 * NaN is NaN: these products matter
        keep[axis] = slice(lo, hi + 1)
        pb[i], pe[i], kernel[i] = new_b, new_e, hi - lo + 1
        changed = True
    if not changed:
        return False
    new_w = NewConst(np.ascontiguousarray(w[tuple(keep)]), wv)
    return _replace_with(rewriter, op, op.name, [x, new_w] + list(op.operands[2:]), _with_window(op, None, pb, pe))


@pattern(("graph.max_pool", "graph.avg_pool"), name="trim-pool-window")
def trim_pool_window(op: Operation, rewriter: PatternRewriter) -> bool:
    if op.name == "graph.avg_pool" and op.attributes.get("count_include_pad", False):
        return False                    # the divisor counts the pads
    x, out = op.operands[0], op.results[0].type
    nspatial = x.type.rank - 2
    kernel = list(op.attributes["kernel"])
    strides, dilations, pb, pe = _window_attrs(op, nspatial)
    if op.name == "graph.avg_pool":
        dilations = [1] * nspatial
    changed = False
    for i in range(nspatial):
        found = trim_axis(x.type.shape[2 + i], out.shape[2 + i], kernel[i], strides[i], dilations[i], pb[i], pe[i])
        if found is None:
            continue
        lo, hi, new_b, new_e = found
        cand_k, cand_b, cand_e = list(kernel), list(pb), list(pe)
        cand_b[i], cand_e[i], cand_k[i] = new_b, new_e, hi - lo + 1
        # Pooling wants pads smaller than the kernel and (ceil mode) the same output: check each axis.
        if _infer(op.name, [x], _with_window(op, cand_k, cand_b, cand_e)) != [out]:
            continue
        kernel, pb, pe = cand_k, cand_b, cand_e
        changed = True
    return changed and _replace_with(rewriter, op, op.name, [x], _with_window(op, kernel, pb, pe))


TRIM_PATTERNS: tuple[Pattern, ...] = (trim_conv_window, trim_pool_window)


def trim_window(root: Operation, *, max_iterations: int = 10) -> RewriteStats:
    """Removes kernel taps that read only padding from the convs and poolings under ``root``."""
    return apply_patterns_greedily(root, TRIM_PATTERNS, fold=False, max_iterations=max_iterations)


@register_pass
class TrimWindowPass(_GreedyPass):
    name = "trim-window"
    summary = "drop conv/pool kernel taps that read only padding (constant conv weights, finite dropped taps)"
    options: ClassVar[dict[str, Option]] = {
        "max_iterations": Option(10, "greedy driver iterations before giving up"),
    }

    def run(self, module):
        return self._finish(trim_window(module, max_iterations=self.max_iterations))


__all__ = ["TRIM_PATTERNS", "TrimWindowPass", "trim_axis", "trim_window"]
