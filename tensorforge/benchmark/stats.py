"""Comparing outputs and timings: relative error, and ratios that survive a noisy machine."""
from __future__ import annotations

import statistics
from typing import Sequence

import numpy as np


def abs_diff(out: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|out - ref| elementwise (float64, same shapes), where a NaN or an infinity the reference
    also has counts as agreement (0) and one it lacks as an infinite error: so that one NaN
    cannot hide inside a max (Python's ``max(0.0, nan)`` is 0.0) and a model whose reference
    is NaN there too is not charged for it."""
    with np.errstate(invalid="ignore"):
        diff = np.abs(out - ref)
    odd = ~np.isfinite(diff)
    if odd.any():
        same = (np.isnan(out) & np.isnan(ref)) | (out == ref)
        diff[odd] = np.where(same[odd], 0.0, np.inf)
    return diff


def max_rel_err(out, ref) -> float:
    """max |out - ref| / max |ref| (finite |ref| only): one number per output that does not blow
    up near zeros; inf where a NaN or infinity of one side is missing from the other."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    if out.shape != ref.shape:
        return float("inf")
    if out.size == 0:
        return 0.0
    finite = np.abs(ref[np.isfinite(ref)])
    return float(abs_diff(out, ref).max() / max(finite.max() if finite.size else 0.0, 1e-30))


def max_rel_err_all(outs: Sequence, refs: Sequence) -> float:
    """The worst ``max_rel_err`` over paired outputs (inf when their counts differ)."""
    if len(outs) != len(refs):
        return float("inf")
    return max((max_rel_err(o, r) for o, r in zip(outs, refs)), default=0.0)


def max_abs_diff_all(outs: Sequence, refs: Sequence) -> float:
    """The largest |out - ref| over paired outputs (inf when counts or shapes differ): what a
    reduced-precision model's error looks like in the units of its outputs."""
    if len(outs) != len(refs):
        return float("inf")
    worst = 0.0
    for o, r in zip(outs, refs):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        if o.shape != r.shape:
            return float("inf")
        if o.size:
            worst = max(worst, float(abs_diff(o, r).max()))
    return worst


def top1_agreement(outs: Sequence, refs: Sequence) -> float | None:
    """The fraction of rows whose argmax over the last axis agrees with the reference's, for
    classifier-like models (one float output of rank >= 2 with at least two classes; an LM's
    logits count per position); None for other models, where an argmax means nothing."""
    if len(outs) != 1 or len(refs) != 1:
        return None
    o, r = np.asarray(outs[0]), np.asarray(refs[0])
    if o.shape != r.shape or o.ndim < 2 or o.shape[-1] < 2 or o.dtype.kind != "f" or o.size == 0:
        return None
    return float(np.mean(o.argmax(axis=-1) == r.argmax(axis=-1)))


def quartile_spread(values: Sequence[float]) -> float:
    """Interquartile range over median: how noisy a set of samples is (nan below 2 samples)."""
    if len(values) < 2:
        return float("nan")
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / statistics.median(values)


def ratio_stats(slow: Sequence[float], fast: Sequence[float]) -> tuple[float, float]:
    """Median and relative IQR of per-round ratios slow/fast (rounds are interleaved, so a slow
    spell of the machine cancels out within a round)."""
    ratios = [s / f for s, f in zip(slow, fast)]
    return statistics.median(ratios), quartile_spread(ratios)
