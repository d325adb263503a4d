"""Spending a model's trial budget across its tasks where the end-to-end gain looks largest.

A model's latency is about ``sum(weight_i * latency_i)`` over its tasks, so one more batch on task
i is worth ``weight_i * best_i * expected relative gain_i``.  The expected gain (as in TVM's
gradient task scheduler) is the relative improvement the task's last batch brought, plus an
optimistic term that shrinks with the trials it already had (a task that has been tried little
may still hold a lot).  Every task first gets one round, so each has a measured default and best.

The budget counts records, not runs: records the database already holds for a task count against
it, so repeating a tune with the same database does no trials, and raising ``trials`` continues
where the last run stopped.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

OPTIMISM = 0.1          # expected relative gain of a task that has had no trials


@dataclass
class TaskState:
    weight: int
    trials: int = 0                      # records (earlier runs included)
    best_s: float = math.inf
    last_gain: float = 0.0
    rounds: int = 0
    done: bool = False                   # space exhausted or the task reached its cap
    history: list[float] = field(default_factory=list)

    def observe(self, trials: int, best_s: float) -> None:
        before = self.best_s
        self.trials += trials
        self.rounds += 1
        self.best_s = min(self.best_s, best_s)
        self.last_gain = (before - self.best_s) / before if math.isfinite(before) and before > 0 else 0.0
        self.history.append(self.best_s)


class TaskScheduler:
    """Picks the next task to give a batch to; ``None`` when the budget is spent."""

    def __init__(self, weights: list[int], budget: int, per_task: int | None = None,
                 existing: list[int] | None = None, best: list[float] | None = None):
        self.states = [TaskState(w) for w in weights]
        self.per_task = per_task
        existing = existing or [0] * len(weights)
        for s, n, b in zip(self.states, existing, best or [math.inf] * len(weights)):
            s.trials, s.best_s = n, b
            s.rounds = 1 if n else 0
            if per_task is not None and n >= per_task:
                s.done = True
        self.budget = max(0, budget - sum(existing))

    @property
    def remaining(self) -> int:
        return self.budget

    def allowance(self, i: int, batch: int) -> int:
        """Trials task ``i`` may take in its next batch."""
        cap = math.inf if self.per_task is None else self.per_task - self.states[i].trials
        return int(max(0, min(batch, self.budget, cap)))

    def next_task(self) -> int | None:
        if self.budget <= 0:
            return None
        live = [i for i, s in enumerate(self.states) if not s.done]
        if not live:
            return None
        fresh = [i for i in live if self.states[i].rounds == 0]
        if fresh:
            return fresh[0]
        return max(live, key=self.priority)

    def priority(self, i: int) -> float:
        s = self.states[i]
        latency = s.best_s if math.isfinite(s.best_s) else 1.0
        return s.weight * latency * (s.last_gain + OPTIMISM / math.sqrt(1 + s.trials))

    def observe(self, i: int, trials: int, best_s: float, exhausted: bool = False) -> None:
        self.states[i].observe(trials, best_s)
        self.budget -= trials
        s = self.states[i]
        if exhausted or (self.per_task is not None and s.trials >= self.per_task):
            s.done = True
