"""Many models in one tune: the union of their tasks, each shared kernel tuned once.

Tasks are keyed by their workload key (the kernel's structure, shapes, dtypes and constant
operands), so a 3x3 convolution that ResNet-18 and ResNet-50 both run is ONE task: its records
serve both models' compiles.  What the scheduler must then weigh is not "how often one model runs
it" but how much of *all* the models' time it is:

    share(t) = sum over models m of  count(m, t) x latency(t) / latency(m)

where ``latency(m) = sum over t of count(m, t) x latency(t)``.  A kernel that is 30% of a small
model and 1% of a big one counts 0.31, the same whichever model is slower in absolute terms (each
model's latency matters to its own users).  The scheduler multiplies its weight by the task's
latency itself, so the weight it gets is ``share(t) / latency(t) = sum_m count(m, t) / latency(m)``
(``ModelShares.weights``).  Latencies are the measured best once a task has one, before that a
roofline estimate from the task's flops and bytes; the weights are recomputed after every batch.
With one model the weights are proportional to the counts: the scheduler behaves as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .tasks import Task

# Rough machine rates of the estimate used only until a task is measured.
_FLOPS_PER_CORE = 2.0e10
_BYTES_PER_S = 1.0e10


@dataclass
class ModelShares:
    """Which models use which task how often, and the scheduler weights that follow."""

    models: list[str]
    uses: dict[str, dict[str, int]] = field(default_factory=dict)      # task key -> model -> count

    def users(self, key: str) -> list[str]:
        return [m for m in self.models if m in self.uses.get(key, {})]

    def weights(self, tasks: Sequence[Task], latencies: Sequence[float], cores: int = 1) -> list[float]:
        """Scheduler weight per task: ``sum_m count(m, t) / latency(m)``; ``latencies``: best
        measured seconds per task (inf: not yet measured, then estimated)."""
        lat = [l if math.isfinite(l) and l > 0 else estimate_seconds(t, cores) for t, l in zip(tasks, latencies)]
        model_s = {m: 0.0 for m in self.models}
        for t, l in zip(tasks, lat):
            for m, n in self.uses.get(t.key, {}).items():
                model_s[m] += n * l
        return [sum(n / model_s[m] for m, n in self.uses.get(t.key, {}).items() if model_s[m] > 0) for t in tasks]

    def shares(self, tasks: Sequence[Task], latencies: Sequence[float], cores: int = 1) -> list[float]:
        """Each task's total share of all the models' latency (the sum over models of its fraction)."""
        lat = [l if math.isfinite(l) and l > 0 else estimate_seconds(t, cores) for t, l in zip(tasks, latencies)]
        return [w * l for w, l in zip(self.weights(tasks, latencies, cores), lat)]


def estimate_seconds(task: Task, cores: int = 1) -> float:
    """A roofline guess of one call, for a task not measured yet."""
    return max(task.flops / (_FLOPS_PER_CORE * max(1, cores)), task.bytes / _BYTES_PER_S, 1e-7)


def union_tasks(per_model: Mapping[str, Sequence[Task]]) -> tuple[list[Task], ModelShares]:
    """The distinct tasks of several models (first model's ``Task`` object for a shared key, its
    ``weight`` the calls per run of all the models together) and who uses them, heaviest total
    work first."""
    shares = ModelShares(list(per_model))
    merged: dict[str, Task] = {}
    for name, tasks in per_model.items():
        for t in tasks:
            shares.uses.setdefault(t.key, {})[name] = shares.uses.get(t.key, {}).get(name, 0) + t.weight
            if t.key in merged:
                merged[t.key].weight += t.weight
            else:
                merged[t.key] = Task(t.key, t.name, t.kind, t.func, t.weight, t.flops, t.bytes, dict(t.problem))
    out = list(merged.values())
    out.sort(key=lambda t: -(t.weight * max(t.flops, t.bytes)))
    return out, shares


def single(tasks: Sequence[Task], name: str = "model") -> ModelShares:
    """The shares of one model's tasks (what a plain ``tune`` uses)."""
    return ModelShares([name], {t.key: {name: t.weight} for t in tasks})


__all__ = ["ModelShares", "estimate_seconds", "single", "union_tasks"]
