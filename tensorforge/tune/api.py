"""``tensorforge.tune``: tune every kernel of a model and store the results in a tuning database.

    report = tensorforge.tune(model, example_inputs, trials=64, db="tune.sqlite")
    print(report)                                            # per task: trials, best, speedup
    cm = tensorforge.compile(model, example_inputs, db="tune.sqlite")

The loop: extract the model's tasks, load what the database already knows about them (their
records count against ``trials``, so a second run with the same database does nothing), warm-start
the cost model from every record of this target, then until the budget or ``timeout_s`` is spent:
the scheduler picks a task, its search proposes a batch, the measurer builds and times it, the
batch goes to the database in one transaction and into the cost model.
"""
from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..errors import TensorforgeError
from .scheduler import TaskScheduler
from .search import SearchOptions, TaskSearch
from .space import space_for
from .tasks import KINDS, Task, extract_tasks


@dataclass
class TaskReport:
    name: str
    key: str
    kind: str
    weight: int
    flops: float
    trials: int                 # measured in this run
    records: int                # in the database after this run (this target)
    default_s: float
    best_s: float
    best_config: dict | None

    @property
    def speedup(self) -> float:
        return self.default_s / self.best_s if math.isfinite(self.default_s) and self.best_s > 0 else math.nan

    @property
    def gflops(self) -> float:
        return self.flops / self.best_s / 1e9 if math.isfinite(self.best_s) and self.best_s > 0 else 0.0


@dataclass
class TuneReport:
    """What a tune did; ``str()`` is a table."""

    target_key: str
    db_path: str
    tasks: list[TaskReport] = field(default_factory=list)
    trials: int = 0
    seconds: float = 0.0
    stopped: str = ""                     # why the run ended early ("time budget"), else ""

    def model_estimate(self, which: str = "best_s") -> float:
        """Sum of weight x latency over the tasks (what the kernels cost per model run)."""
        vals = [t.weight * getattr(t, which) for t in self.tasks]
        return sum(vals) if all(math.isfinite(v) for v in vals) else math.nan

    def to_dict(self) -> dict:
        return {"target": self.target_key, "db": self.db_path, "trials": self.trials, "seconds": self.seconds,
                "stopped": self.stopped,
                "tasks": [dict(t.__dict__, speedup=t.speedup, gflops=t.gflops) for t in self.tasks]}

    def __str__(self) -> str:
        lines = [f"{'task':28s} {'kind':5s} {'x':>3s} {'trials':>6s} {'records':>7s} {'default ms':>10s} "
                 f"{'best ms':>9s} {'GFLOP/s':>8s} {'speedup':>7s}"]
        for t in self.tasks:
            lines.append(f"{t.name[:28]:28s} {t.kind:5s} {t.weight:3d} {t.trials:6d} {t.records:7d} "
                         f"{_shown(t.default_s * 1e3, 10, 3)} {_shown(t.best_s * 1e3, 9, 3)} "
                         f"{_shown(t.gflops, 8, 1)} {_shown(t.speedup, 7, 2)}")
        d, b = self.model_estimate("default_s"), self.model_estimate("best_s")
        if math.isfinite(d) and math.isfinite(b) and b > 0:
            estimate = f"kernels per model run: default {d * 1e3:.3f} ms, tuned {b * 1e3:.3f} ms ({d / b:.2f}x)"
        else:
            missing = sum(1 for t in self.tasks if not (math.isfinite(t.default_s) and math.isfinite(t.best_s)))
            estimate = f"{missing} of {len(self.tasks)} tasks not measured yet (more --trials): no model estimate"
        lines.append(f"{self.trials} trials in {self.seconds:.1f} s{' (' + self.stopped + ')' if self.stopped else ''}"
                     f"; {estimate}; db {self.db_path}")
        return "\n".join(lines)


def _shown(value: float, width: int, digits: int) -> str:
    """``value`` right-aligned in ``width`` columns, or "-" when it was not measured (nan/inf)."""
    return f"{value:{width}.{digits}f}" if math.isfinite(value) else f"{'-':>{width}s}"


def _open_db(db: Any):
    from .database import TuningDatabase
    if isinstance(db, TuningDatabase):
        return db, False
    return TuningDatabase(db), True


def _cost_model(database, target, target_key: str, spaces: dict):
    """The cost model warm-started from every record of this target (None if the module is missing)."""
    try:
        from .cost_model import CostModel
        from .features import gemm_features
    except ImportError:
        return None

    def featurize(w, r):
        cfg = r.config
        if cfg.get("kind") == "gemm":
            return gemm_features(cfg["params"], (w.description or {}).get("problem") or {}, target)
        space = spaces.get(w.key)
        if space is not None and cfg.get("kind") == "loop":
            return space.features(cfg, space.check(cfg))
        return None

    return CostModel.warm_start(database, target_key, featurize)


def tune(model: Any, example_inputs: Sequence | None = None, trials: int = 64, db: Any = None,
         timeout_s: float | None = None, progress: bool = True, *, batch_size: int = 8,
         per_task: int | None = None, kinds: Sequence[str] = KINDS, target=None, seed: int = 0,
         passes: Any = None, measurer=None, options: SearchOptions | None = None) -> TuneReport:
    """Tunes the kernels of ``model`` (anything ``compile`` takes, or a list of ``Task``).

    ``trials``: measured candidates for the whole model, records already in ``db`` included;
    ``db``: a path or ``TuningDatabase`` (None: the default database); ``timeout_s``: stop
    starting batches after this long; ``batch_size``: candidates per measured batch (one database
    transaction each); ``per_task``: at most this many records per task; ``kinds``: which tasks
    ("gemm", "conv", "loop"); ``measurer``: a ``measure.Measurer`` to use (else one is made).
    """
    from ..codegen.target import Target
    from ..progress import Progress
    from .measure import Measurer
    if trials < 0 or batch_size < 1:
        raise TensorforgeError(f"tune needs trials >= 0 and batch_size >= 1 (got {trials}, {batch_size})")
    start = time.perf_counter()
    target = target or Target.host()
    target_key = target.key()
    if isinstance(model, (list, tuple)) and all(isinstance(t, Task) for t in model):
        tasks = list(model)
    else:
        tasks = extract_tasks(model, example_inputs, target, passes, kinds)
    database, own_db = _open_db(db)
    own_measurer = measurer is None
    report = TuneReport(target_key, str(getattr(database, "path", db)))
    try:
        for t in tasks:
            database.add_workload(t.workload())
        spaces = {t.key: space_for(t, target) for t in tasks}
        searches = []
        for i, t in enumerate(tasks):
            s = TaskSearch(t, spaces[t.key], None, rng=random.Random(seed * 7919 + i), options=options or SearchOptions())
            s.load(database.records(t.key, target_key))
            searches.append(s)
        existing = [len(s.measured) for s in searches]
        sched = TaskScheduler([t.weight for t in tasks], trials, per_task, existing, [s.best_s for s in searches])
        run_trials = [0] * len(tasks)
        cost = None
        if sched.remaining > 0:          # nothing to tune: no model to train, no runner to start
            cost = _cost_model(database, target, target_key, spaces)
            for s in searches:
                s.model = cost
            if own_measurer:
                measurer = Measurer(target)
        with Progress(f"tuning {len(tasks)} tasks", total=sched.remaining, enabled=progress) as bar:
            while True:
                if timeout_s is not None and time.perf_counter() - start > timeout_s:
                    report.stopped = "time budget"
                    break
                i = sched.next_task()
                if i is None:
                    break
                s, t = searches[i], tasks[i]
                configs = s.next_batch(sched.allowance(i, batch_size))
                if not configs:
                    sched.observe(i, 0, s.best_s, exhausted=True)
                    continue
                results = measurer.measure(t, configs)
                s.commit(results, database, target_key)
                learned = s.features_of(results) if cost is not None else None
                if learned is not None:
                    cost.update(learned[0], learned[1], [t.key] * len(learned[1]))
                sched.observe(i, len(results), s.best_s, exhausted=s.exhausted)
                run_trials[i] += len(results)
                bar.advance(len(results), note=_note(t, s, timeout_s, start))
        for t, s, n in zip(tasks, searches, run_trials):
            best = s.best
            report.tasks.append(TaskReport(t.name, t.key, t.kind, t.weight, t.flops, n,
                                           database.count(t.key, target_key), s.default_s(), s.best_s,
                                           best[1] if best else None))
        report.trials = sum(run_trials)
    finally:
        if own_measurer and measurer is not None:
            measurer.close()
        if own_db:
            database.close()
    report.seconds = time.perf_counter() - start
    return report


def _note(t: Task, s: TaskSearch, timeout_s: float | None, start: float) -> str:
    gf = t.flops / s.best_s / 1e9 if math.isfinite(s.best_s) else 0.0
    left = "" if timeout_s is None else f", {max(0.0, timeout_s - (time.perf_counter() - start)):.0f} s left"
    return f"{t.name}: {len(s.measured)} trials, best {gf:.1f} GFLOP/s{left}"


def default_db_path() -> str:
    from .database import default_path
    return os.fspath(default_path())
