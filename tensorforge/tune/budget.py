"""A tune's time budget covering all of its steps: the search, the confirmation and the model check.

``tune(timeout_s=...)`` used to stop *starting* search batches at the budget, then confirmed every
task it had measured and checked the tuned kernels inside the model: with a 120 s budget the
benchmark's models took 127-295 s (EfficientNet-B0: 22 confirmations of ~1.4 s, then two profiled
builds of the whole model, ~15 s each).  A user who asks for two minutes should get two minutes.
So the search ends early enough to leave the time the later steps will take, as estimated while
it runs:

* a confirmation re-times the default and the ``top`` best configs for ``rounds`` rounds of
  ``min_repeat_s`` each: about ``(top + 1) * rounds * min_repeat_s`` per task that got new
  records (measured 1.4 s a task against the 1.8 s this gives);
* the model check builds the model twice with kernel timers and runs both ``ROUNDS`` times.  The
  untuned build is made at the start of the tune (``in_model.ProfiledBaseline``, reused by the
  check), so its build time is known: the tuned build costs about as much again, plus the runs
  at the untuned model's measured latency.

A search batch is not cut once started either, so the search also stops when the next batch would
not end in time at the pace of the last ones (a batch of cold builds takes 10 s and more), or at
the pace of the chosen task's own last batches where those ran longer: EfficientNet-B0 at batch 8
had batches of 22-36 s on its 112x112 layers against a running mean of the whole search well under
that, and its 300 s tune ran 451 s.

The estimates can be off (a slow build, load from other processes); the confirmation and the
check still run to the end once started, so a tune may overrun by that error, not by whole steps.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class TuneBudget:
    """The wall-clock budget of one ``tune`` call (``timeout_s`` None: no budget)."""

    timeout_s: float | None
    start: float
    confirm_task_s: float = 0.0          # the estimated cost of confirming one task
    model_check_s: float = 0.0           # the estimated cost of the model check (0: none will run)
    batch_s: float = 0.0                 # a search batch's seconds, a running mean of the last ones
    task_batch_s: dict = field(default_factory=dict)    # the same per task (its index in the tune)

    @classmethod
    def of(cls, timeout_s: float | None, confirm) -> "TuneBudget":
        """The budget of a tune started now whose confirmation step is ``confirm`` (``ConfirmOptions``)."""
        per_task = (confirm.top + 1) * confirm.rounds * confirm.min_repeat_s if confirm.top > 0 else 0.0
        return cls(timeout_s, time.perf_counter(), per_task)

    def observe_batch(self, seconds: float, task: int | None = None) -> None:
        """A search batch (of ``task``, when given) took ``seconds``: the pace the next one is
        expected at."""
        self.batch_s = _running_mean(self.batch_s, seconds)
        if task is not None:
            self.task_batch_s[task] = _running_mean(self.task_batch_s.get(task, 0.0), seconds)

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def reserve_s(self, tasks_to_confirm: int) -> float:
        """Seconds to keep for the confirmation of ``tasks_to_confirm`` tasks and the model check."""
        return tasks_to_confirm * self.confirm_task_s + (self.model_check_s if tasks_to_confirm else 0.0)

    def search_over(self, run_trials: Sequence[int], task: int | None = None) -> bool:
        """Whether the search must stop now: the next batch (of ``task``, when known: at the slower
        of its own pace and the search's) would not end before the reserve for the tasks measured
        so far (``run_trials``: this run's trials per task), at least one task's confirmation and
        the model check kept in reserve."""
        if self.timeout_s is None:
            return False
        to_confirm = max(1, sum(1 for n in run_trials if n > 0))
        pace = max(self.batch_s, self.task_batch_s.get(task, 0.0))
        return self.elapsed() + pace + self.reserve_s(to_confirm) > self.timeout_s

    def left_s(self, tasks_to_confirm: int = 0) -> float | None:
        """Seconds the search has left (None: no budget)."""
        if self.timeout_s is None:
            return None
        return max(0.0, self.timeout_s - self.elapsed() - self.reserve_s(tasks_to_confirm))


def _running_mean(mean: float, seconds: float) -> float:
    return seconds if mean == 0.0 else 0.5 * (mean + seconds)


__all__ = ["TuneBudget"]
