"""Spending a model's trial budget across its tasks where the end-to-end gain looks largest.

A model's latency is about ``sum(weight_i * latency_i)`` over its tasks, so one more batch on task
i is worth ``weight_i * best_i * expected relative gain_i``.  The expected gain (as in TVM's
gradient task scheduler) is the relative improvement the task's last batch brought, plus an
optimistic term that shrinks with the trials it already had (a task that has been tried little
may still hold a lot).  Every task first gets one round, so each has a measured default and best.

The budget counts records, not runs: records the database already holds for a task count against
it, so repeating a tune with the same database does no trials, and raising ``trials`` continues
where the last run stopped.

Weights are floats: with several models (``multi.py``) a task's weight is its calls per run over
each using model's latency, summed, and ``set_weights`` updates them as latencies are measured.
A distributed tune keeps several batches in flight: ``dispatched`` reserves their trials (a task
with a batch out is not "fresh" again and the budget is not handed out twice), and ``observe(...,
dispatched=n)`` settles the reservation (a batch that came back short returns the difference).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

OPTIMISM = 0.1          # expected relative gain of a task that has had no trials


@dataclass
class TaskState:
    weight: float
    trials: int = 0                      # records (earlier runs included)
    best_s: float = math.inf
    last_gain: float = 0.0
    rounds: int = 0
    done: bool = False                   # space exhausted or the task reached its cap
    in_flight: int = 0                   # trials dispatched and not yet observed
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

    def __init__(self, weights: list[float], budget: int, per_task: int | None = None,
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
        s = self.states[i]
        cap = math.inf if self.per_task is None else self.per_task - s.trials - s.in_flight
        return int(max(0, min(batch, self.budget, cap)))

    def set_weights(self, weights: list[float]) -> None:
        for s, w in zip(self.states, weights):
            s.weight = w

    def dispatched(self, i: int, trials: int) -> None:
        """A batch of ``trials`` for task ``i`` went out and will be ``observe``d later."""
        self.states[i].in_flight += trials
        self.budget -= trials

    def next_task(self) -> int | None:
        if self.budget <= 0:
            return None
        live = [i for i, s in enumerate(self.states)
                if not s.done and (self.per_task is None or s.trials + s.in_flight < self.per_task)]
        if not live:
            return None
        fresh = [i for i in live if self.states[i].rounds == 0 and self.states[i].in_flight == 0]
        if fresh:
            return fresh[0]
        return max(live, key=self.priority)

    def priority(self, i: int) -> float:
        s = self.states[i]
        latency = s.best_s if math.isfinite(s.best_s) else 1.0
        return s.weight * latency * (s.last_gain + OPTIMISM / math.sqrt(1 + s.trials))

    def observe(self, i: int, trials: int, best_s: float, exhausted: bool = False, dispatched: int = 0) -> None:
        """Task ``i``'s batch came back with ``trials`` results; ``dispatched``: what ``dispatched``
        reserved for it (0 in the one-batch-at-a-time loop)."""
        self.states[i].observe(trials, best_s)
        self.states[i].in_flight -= dispatched
        self.budget -= trials - dispatched
        s = self.states[i]
        if exhausted or (self.per_task is not None and s.trials + s.in_flight >= self.per_task):
            s.done = True
