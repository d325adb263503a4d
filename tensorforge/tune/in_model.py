"""The model check: every tuned kernel timed where it runs, inside the model, against the default.

The search and the confirmation time a kernel alone, called again and again on the same buffers:
its weights and inputs stay in the caches, its threads stay awake, nothing else writes its input.
In a model a layer's weights were last read one whole run ago, its input was just written by the
layer before, and the kernels around it share the caches.  Kernels whose tuned config trades
memory for arithmetic rank differently there: ResNet-18's 14x14 3x3 layers ran 1.15x faster by
Winograd F(4x4) alone and 0.84x as fast in the model (kernel timers, one process).  So after the
confirmation, ``tune`` builds the model twice with per-kernel timers, untuned and with the
database's choice, runs both interleaved (``rounds`` rounds, each a warm-up run and ``runs``
timed runs per build) and stores for every workload with a tuned config a confirmation on clock
"model": per round, the summed kernel seconds of its kernels in each build.  It is the latest
confirmation, so ``TuningDatabase.best`` decides by it: a tuned config stays applied only if its
kernels beat the default's by more than the margin in the model.  Fused pairs (their band is
timed as one kernel) and models over symbolic shapes are left to the confirmation.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..ir.builtin import ModuleOp
from ..ir.symbolic import symbol_table_of
from .database import Confirmation
from .space import DEFAULT
from .tasks import Task, workload_key

ROUNDS = 12
RUNS = 4
PAUSE_S = 0.02      # between builds: the other build's threads stop spinning


@dataclass
class ModelCheck:
    """One tuned workload's verdict: ``speedup`` is the median over rounds of the default's kernel
    seconds over the tuned build's, in the model; ``kept`` whether the tuned config stays."""

    key: str
    name: str
    speedup: float
    kept: bool


def checkable(lowered: ModuleOp) -> bool:
    """Whether the model check can time ``lowered`` (static shapes only)."""
    return not symbol_table_of(lowered.main).ranges


class ProfiledBaseline:
    """The untuned build of ``lowered`` with kernel timers, made before the search so that a tune's
    budget knows what the model check will cost (``budget.py``): ``build_s`` to build it (the
    tuned build, never in the compile cache, costs about as much again: a cached build says
    what its compiler took, ``CompiledLibrary.build_seconds``) and ``latency_s``, one run."""

    def __init__(self, lowered: ModuleOp, target) -> None:
        from ..codegen.c.build import build_lowered
        from ..report.collect import example_inputs
        t0 = time.perf_counter()
        self.model, _ = build_lowered(lowered, lowered, target, name="model_check", profile=True, tuning=None)
        self.build_s = time.perf_counter() - t0
        compiler_s = self.model.library.build_seconds()
        if self.model.library.cache_hit and math.isfinite(compiler_s):
            self.build_s += compiler_s
        self.inputs = example_inputs(self.model)
        self.model.run(self.inputs)
        t0 = time.perf_counter()
        self.model.run(self.inputs)
        self.latency_s = time.perf_counter() - t0

    def check_s(self, rounds: int = ROUNDS, runs: int = RUNS) -> float:
        """The model check's estimated seconds: the tuned build, then both builds' rounds."""
        return self.build_s + rounds * 2 * (PAUSE_S + (runs + 1) * self.latency_s)


def check_in_model(lowered: ModuleOp, database, target, tasks: Sequence[Task], margin: float,
                   rounds: int = ROUNDS, runs: int = RUNS,
                   baseline: ProfiledBaseline | None = None) -> list[ModelCheck]:
    """Times the tuned kernels of ``lowered`` (a model lowered to kernels, as ``tasks`` were found
    in it) against the default in the model, stores a "model" confirmation for each and returns
    the verdicts (empty when nothing is tuned, or the model has symbolic shapes).  ``baseline``:
    the untuned build made earlier (else it is built here)."""
    from ..codegen.c.build import build_lowered
    from .apply import tuning_from_db
    func = lowered.main
    if not checkable(lowered):
        return []
    tuning = tuning_from_db(database, target, margin=margin)
    if tuning is None:
        return []
    tuned, _ = build_lowered(lowered, lowered, target, name="model_check", profile=True, tuning=tuning)
    keys = [workload_key(op) for op in func.body if op.name == "structured.kernel"]
    present = set(keys)
    applied = {k: cfg for k, cfg in tuning.applied.items() if k in present}
    if not applied:
        return []
    baseline = baseline or ProfiledBaseline(lowered, target)
    untuned, xs = baseline.model, baseline.inputs
    seconds = {0: [], 1: []}            # per round: seconds of each kernel, untuned and tuned
    for _ in range(rounds):
        for b, model in ((0, untuned), (1, tuned)):
            time.sleep(PAUSE_S)
            model.run(xs)
            model.reset_kernel_times()
            for _ in range(runs):
                model.run(xs)
            seconds[b].append(np.asarray(model.kernel_times(), dtype=np.float64) / runs)
    names = {t.key: t.name for t in tasks}
    target_key = target.key()
    out = []
    for key, config in applied.items():
        where = [i for i, k in enumerate(keys) if k == key]
        rows = tuple(tuple(float(s[where].sum()) for s in seconds[b]) for b in (0, 1))
        if min(min(r) for r in rows) <= 0.0:
            continue                     # a kernel the timers do not see (fused into a pair)
        conf = Confirmation(key, target_key, (DEFAULT, config), rows, "model", database.count(key, target_key))
        database.add_confirmation(conf)
        out.append(ModelCheck(key, names.get(key, "kernel"), conf.speedups[1], bool(conf.winners(margin))))
    return out


__all__ = ["ModelCheck", "ProfiledBaseline", "check_in_model", "checkable"]
