"""Accuracy-driven fallback: the int8 layers that hurt most go back to float32.

``quantize(..., max_error=e)`` holds out a fifth of the calibration samples (at least one), which
calibration does not see.  On them the float32 model and the quantized one run side by side in
the reference interpreter, before the graph optimiser fuses anything, so every quantized
contraction's float input ``x`` and result ``y`` can be compared with the float32 model's.  The
error a layer *adds* is the growth of the relative RMS error across it,
``err(y) - err(x)``: its own rounding of activations and weights, not what it inherited.  While the
model's output error (relative RMS against float32, the worst output) exceeds ``e``, the layers
with the largest added error are re-promoted to float32 (1, then 2, 4, ... more at a time, at
most a quarter of the layers), each round re-quantizing with the same calibration statistics;
the round with the smallest error wins (the errors of layers can cancel, so a promotion may not
help).
The result records what was promoted and the errors measured (``tf.fallback``,
``tf.holdout_error``), so a user can see what the compiler did and why.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..ir.core import Operation
from ..ir.interpreter import run_function


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    """RMS of ``got - want`` over the RMS of ``want`` (0 when both are 0), in float64."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    ref = float(np.sqrt(np.mean(want ** 2))) if want.size else 0.0
    err = float(np.sqrt(np.mean((got - want) ** 2))) if want.size else 0.0
    return err / ref if ref > 0 else err


@dataclass
class Probe:
    """One model's run on the held-out samples, recorded by the interpreter's observer: per
    sample, the arrays of the values asked for (under the names given) and the outputs."""

    values: list[dict[str, np.ndarray]] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list)

    @classmethod
    def run(cls, func, samples: Sequence[list[np.ndarray]], wanted: dict[int, list[str]]) -> "Probe":
        """``wanted``: ``id`` of a value -> the names to record it under."""
        probe = cls()
        for inputs in samples:
            seen: dict[str, np.ndarray] = {}
            for a, x in zip(func.args, inputs):
                for name in wanted.get(id(a), ()):
                    seen[name] = np.asarray(x)

            def observe(op: Operation, results: list) -> None:
                for r, arr in zip(op.results, results):
                    for name in wanted.get(id(r), ()):
                        seen[name] = np.array(arr, copy=True)

            probe.outputs.append(run_function(func, inputs, observe))
            probe.values.append(seen)
        return probe

    def error(self, name: str, reference: "Probe") -> float:
        """The worst relative error of the value recorded as ``name`` against ``reference``'s."""
        return max((relative_error(v[name], r[name]) for v, r in zip(self.values, reference.values)
                    if name in v and name in r), default=0.0)

    def output_error(self, reference: "Probe") -> float:
        """The worst relative error of any float output against ``reference``'s."""
        return max((relative_error(g, w) for got, want in zip(self.outputs, reference.outputs)
                    for g, w in zip(got, want) if np.issubdtype(np.asarray(w).dtype, np.floating)), default=0.0)


def added_errors(keys: Sequence[str], quantized: Probe, reference: Probe) -> dict[str, float]:
    """Per layer key, the growth of the relative error from its input (``x:KEY``) to its result
    (``y:KEY``)."""
    return {k: max(0.0, quantized.error(f"y:{k}", reference) - quantized.error(f"x:{k}", reference)) for k in keys}


def search(quantize_once: Callable[[tuple], tuple], n_layers: int, max_error: float) -> tuple:
    """Re-promotes layers until the held-out output error is at most ``max_error``.
    ``quantize_once(promoted)`` quantizes with the keys ``promoted`` kept float32 and returns
    (module, output error, added error per quantized key).  Returns (the module of the round with
    the smallest error, its promoted keys, the all-int8 error, its error)."""
    promoted: tuple = ()
    module, error, added = quantize_once(promoted)
    first, step, limit = error, 1, max(1, n_layers // 4)
    best = (module, promoted, error)
    while error > max_error and len(promoted) < limit and added:
        worst = sorted(added, key=lambda k: -added[k])[:min(step, limit - len(promoted))]
        promoted = promoted + tuple(worst)
        module, error, added = quantize_once(promoted)
        if error < best[2]:              # errors of layers can cancel: a promotion may not help
            best = (module, promoted, error)
        step *= 2
    return best[0], best[1], first, best[2]


__all__ = ["Probe", "added_errors", "relative_error", "search"]
