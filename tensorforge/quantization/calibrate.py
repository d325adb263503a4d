"""Calibration: the range of every quantizable contraction's activations, observed on sample inputs.

The optimised graph runs in the reference interpreter on each calibration sample; an observer
records the left operand of every contraction the int8 rewrite can take (``rewrite.candidates``).
Three ways turn the observations into a range ``[lo, hi]`` (always containing 0, so that 0 is
exact in uint8):

* ``minmax``: the smallest and largest value seen (no clipping; outliers stretch the scale);
* ``percentile``: the ``percentile``-th percentile of |x| clips the tails (the values beyond it
  saturate), over the pooled samples;
* ``entropy``: TensorRT's KL-divergence calibration: a 2048-bin histogram of |x|, and the clip
  threshold whose 128-level quantized histogram is closest to the original in KL divergence.

The statistics are plain numbers keyed by each contraction's place in program order, so they can
be saved (``Calibration.save``, JSON) and reused for the same model without the samples.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.builtin import ModuleOp
from ..ir.interpreter import run_function

METHODS = ("minmax", "percentile", "entropy")
_BINS = 2048


@dataclass
class Calibration:
    """Activation ranges per quantizable contraction (``key -> (lo, hi)``) and how they were found."""

    method: str
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: int = 0

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump({"method": self.method, "samples": self.samples,
                       "ranges": {k: list(v) for k, v in self.ranges.items()}}, f, indent=1)

    @classmethod
    def load(cls, path: str) -> "Calibration":
        try:
            with open(path) as f:
                d = json.load(f)
            return cls(d["method"], {k: (float(v[0]), float(v[1])) for k, v in d["ranges"].items()}, int(d["samples"]))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
            raise TensorforgeError(f"cannot read calibration statistics from '{path}': {e}") from None


class _Observer:
    """Everything one contraction's activations showed: extremes, and |x| for the clipping methods."""

    def __init__(self):
        self.lo, self.hi = np.inf, -np.inf
        self.magnitudes: list[np.ndarray] = []

    def add(self, x: np.ndarray, keep: bool) -> None:
        finite = x[np.isfinite(x)]
        if finite.size:
            self.lo, self.hi = min(self.lo, float(finite.min())), max(self.hi, float(finite.max()))
            if keep:
                self.magnitudes.append(np.abs(finite).astype(np.float32).ravel())

    def range(self, method: str, percentile: float) -> tuple[float, float]:
        lo, hi = (min(self.lo, 0.0), max(self.hi, 0.0)) if np.isfinite(self.lo) else (0.0, 0.0)
        if method == "minmax" or not self.magnitudes:
            return lo, hi
        mags = np.concatenate(self.magnitudes)
        t = float(np.percentile(mags, percentile)) if method == "percentile" else _entropy_threshold(mags)
        return max(lo, -t), min(hi, t)


def _entropy_threshold(mags: np.ndarray, levels: int = 128) -> float:
    """The |x| clip threshold minimising KL(P || Q): P the histogram up to the threshold with the
    clipped tail added to its last bin, Q that histogram merged into ``levels`` bins and spread
    back evenly over its non-empty source bins (TensorRT's entropy calibrator)."""
    top = float(mags.max())
    if top == 0.0:
        return 0.0
    hist, edges = np.histogram(mags, bins=_BINS, range=(0.0, top))
    hist = hist.astype(np.float64)
    best, best_kl = top, np.inf
    for i in range(levels, _BINS + 1, 16):
        p = hist[:i].copy()
        p[-1] += hist[i:].sum()
        q = np.zeros(i)
        for chunk in np.array_split(np.arange(i), levels):
            src = hist[chunk]
            nonzero = src > 0
            if nonzero.any():
                q[chunk[nonzero]] = src.sum() / nonzero.sum()
        mask = p > 0
        if not mask.any():
            continue
        ps, qs = p / p.sum(), q / max(q.sum(), 1e-300)
        if (qs[mask] == 0).any():
            continue
        kl = float(np.sum(ps[mask] * np.log(ps[mask] / qs[mask])))
        if kl < best_kl:
            best, best_kl = float(edges[i]), kl
    return best


def _sample_lists(data) -> list[list]:
    """Calibration data as a list of input lists: one array / tensor (one sample of a one-input
    model), a dict (one sample by input name), or a sequence of samples, each an array / tensor
    or a tuple / list of them."""
    if isinstance(data, dict):
        return [list(data.values())]
    if hasattr(data, "shape"):
        return [[data]]
    return [list(item) if isinstance(item, (tuple, list)) else [item] for item in data]


def first_sample(data) -> tuple:
    """The first calibration sample, as example inputs."""
    samples = _sample_lists(data)
    return tuple(samples[0]) if samples else ()


def _samples(data, n_inputs: int) -> list[list[np.ndarray]]:
    """``_sample_lists`` as NumPy arrays, each with the model's number of inputs."""
    def arr(x):
        return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)

    out = []
    for items in _sample_lists(data):
        if len(items) != n_inputs:
            raise TensorforgeError(f"a calibration sample has {len(items)} input(s); the model takes {n_inputs}")
        out.append([arr(x) for x in items])
    return out


def _check_shapes(module: ModuleOp, samples: Sequence[list[np.ndarray]]) -> None:
    for s in samples:
        for a, x in zip(module.main.args, s):
            want = tuple(a.type.shape)
            static = all(isinstance(d, int) for d in want)
            if (static and tuple(x.shape) != want) or len(x.shape) != len(want):
                name = a.name_hint or f"#{a.index}"
                raise TensorforgeError(f"calibration data for input '{name}' has shape {list(x.shape)}; the model "
                                       f"takes {list(want)}: give samples shaped like the example inputs")


def calibrate(module: ModuleOp, data: Iterable, keys: dict, method: str = "minmax",
              percentile: float = 99.99) -> Calibration:
    """Runs ``module`` (optimised) on every calibration sample and returns the ranges of the
    activations of the contractions in ``keys`` (``{id(op): key}``)."""
    if method not in METHODS:
        raise TensorforgeError(f"unknown calibration method '{method}' (choose from {', '.join(METHODS)})")
    samples = _samples(data, len(module.main.args))
    if not samples:
        raise TensorforgeError("calibration data is empty: give at least one sample of the model's inputs")
    _check_shapes(module, samples)
    observers = {k: _Observer() for k in keys.values()}
    produced: dict[int, list[tuple[int, str]]] = {}       # id(producer) -> [(result index, key)]
    from_args: list[tuple[int, str]] = []                 # (argument index, key)
    for op in module.main.body:
        if id(op) not in keys:
            continue
        x = op.operands[0]
        if x.op is None:
            from_args.append((x.index, keys[id(op)]))
        else:
            produced.setdefault(id(x.op), []).append((x.index, keys[id(op)]))
    keep = method != "minmax"

    def observe(op, results) -> None:
        for index, k in produced.get(id(op), ()):
            observers[k].add(np.asarray(results[index]), keep)

    for s in samples:
        run_function(module.main, [x.astype(a.type.dtype.np, copy=False) for a, x in zip(module.main.args, s)],
                     observe)
        for index, k in from_args:
            observers[k].add(np.asarray(s[index]), keep)
    return Calibration(method, {k: o.range(method, percentile) for k, o in observers.items()}, len(samples))


__all__ = ["Calibration", "METHODS", "calibrate", "first_sample"]
