"""Interleaved timing of several callables on a shared, noisy machine.

Runs A B C, B C A, C A B ... so that a slow spell of the machine hits every contender alike, and
reports medians after warm-up; absolute times are not comparable between runs, ratios are.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Timing:
    name: str
    samples: list[float] = field(default_factory=list)   # seconds

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples) * 1e3 if self.samples else float("nan")

    @property
    def min_ms(self) -> float:
        return min(self.samples) * 1e3 if self.samples else float("nan")


def time_interleaved(contenders: dict[str, Callable[[], object]], repeats: int = 10, warmup: int = 2,
                     budget_s: float | None = None,
                     on_round: Callable[[], None] | None = None,
                     block: int = 1, pause_s: float = 0.0, rotate: bool = True) -> dict[str, Timing]:
    """Times each callable ``repeats`` times, interleaved, after ``warmup`` untimed rounds.

    With ``budget_s``, stops early (after at least 3 rounds) once the budget is spent.
    ``on_round`` is called after every round, warm-up included (a progress bar's ``advance``).

    ``block`` > 1 or ``pause_s`` > 0 time each contender in its turn as a block: a pause, one
    untimed call, then ``block`` timed calls.  Contenders that bring their own thread pools
    (torch's OpenMP, OpenBLAS, onnxruntime, our libgomp) keep their threads spinning for a while
    after a call; on a 2-core machine single alternating calls then measure the previous
    contender's spinning as much as the contender itself.

    ``rotate`` starts each timed round one contender further along, so that no contender always
    runs right after the same one: on the 2-vCPU Zen 3 VM the contender after onnxruntime ran a
    1x1 convolution (672 -> 112 at 14x14, 0.5 ms) 1.2-1.5x slower than an identical build timed
    after it, with pauses of 0.05, 0.2 and 1 s alike (onnxruntime's threads had stopped spinning
    45 ms after its last call), and in a fixed order tensorforge's build always followed it.
    """
    results = {name: Timing(name) for name in contenders}
    blocked = block > 1 or pause_s > 0
    for _ in range(warmup):
        for fn in contenders.values():
            fn()
        if on_round is not None:
            on_round()
    start = time.perf_counter()
    names = list(contenders)
    for r in range(repeats):
        shift = r % len(names) if rotate and names else 0
        for name in names[shift:] + names[:shift]:
            fn = contenders[name]
            if blocked:
                time.sleep(pause_s)
                fn()
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                results[name].samples.append(time.perf_counter() - t0)
        if on_round is not None:
            on_round()
        if budget_s is not None and r >= 2 and time.perf_counter() - start > budget_s:
            break
    return results
