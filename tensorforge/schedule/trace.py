"""A schedule as data: the primitives applied, the loops they named and the decisions they took.

The auto-tuner stores traces in its database and replays the best one on every later compile, so
a trace names loops by their stable tags (never by object identity), holds only JSON values, and
replaying it on a freshly lowered ``loop.func`` rebuilds the same loop nest and the same C.

    s = Schedule(fn); s.split("0.1", 16); ...
    text = s.trace.to_json()
    replay(lower_kernel(kernel), Trace.from_json(text))     # same schedule, same emitted C
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from ..errors import ScheduleError
from ..ir.core import Operation

Decision = int | str | None | tuple


@dataclass(frozen=True)
class Step:
    """One primitive: its name, the loops/computes/buffers it named, then its decisions (factors, layouts)."""

    primitive: str
    refs: tuple[str | None, ...]
    decisions: tuple[Decision, ...] = ()

    def to_json(self) -> list:
        return [self.primitive, list(self.refs), [_plain(d) for d in self.decisions]]

    @staticmethod
    def from_json(data: Any) -> "Step":
        try:
            name, refs, decisions = data
            return Step(str(name), tuple(None if r is None else str(r) for r in refs),
                        tuple(_frozen(d) for d in decisions))
        except (TypeError, ValueError) as exc:
            raise ScheduleError(f"trace step {data!r} is not [primitive, [refs...], [decisions...]]") from exc

    def __str__(self) -> str:
        args = [repr(r) for r in self.refs] + [repr(d) for d in self.decisions]
        return f"{self.primitive}({', '.join(args)})"


def _plain(d: Decision):
    return [_plain(x) for x in d] if isinstance(d, tuple) else d


def _frozen(d):
    return tuple(_frozen(x) for x in d) if isinstance(d, list) else d


@dataclass
class Trace:
    """The steps of a schedule in the order they were applied."""

    steps: list[Step] = field(default_factory=list)

    def append(self, step: Step) -> None:
        self.steps.append(step)

    def __iter__(self) -> Iterator[Step]:
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)

    def copy(self) -> "Trace":
        return Trace(list(self.steps))

    def to_json(self) -> str:
        return json.dumps({"version": 1, "steps": [s.to_json() for s in self.steps]})

    @staticmethod
    def from_json(text: str) -> "Trace":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ScheduleError(f"trace is not valid JSON: {exc}") from exc
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("steps"), list):
            raise ScheduleError("trace JSON must be an object {'version': 1, 'steps': [...]}")
        return Trace([Step.from_json(s) for s in data["steps"]])

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self.steps)


def replay(fn: Operation, trace: Trace, check: bool = True):
    """Applies ``trace`` to ``fn`` (a freshly lowered loop.func, changed in place); returns the Schedule.

    Raises ``ScheduleError`` naming the step when one does not apply (e.g. a trace recorded for a
    different kernel).
    """
    from .primitives import PRIMITIVES, Schedule

    s = Schedule(fn, check=check)
    for i, step in enumerate(trace):
        if step.primitive not in PRIMITIVES:
            raise ScheduleError(f"trace step {i} ({step}): unknown primitive '{step.primitive}' "
                                f"(known: {', '.join(sorted(PRIMITIVES))})")
        try:
            getattr(s, step.primitive)(*step.refs, *step.decisions)
        except ScheduleError as exc:
            raise ScheduleError(f"trace step {i} ({step}) does not apply: {exc}") from exc
    return s
