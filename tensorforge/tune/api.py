"""``tensorforge.tune``: tune every kernel of a model and store the results in a tuning database.

    report = tensorforge.tune(model, example_inputs, trials=64, db="tune.sqlite")
    print(report)                                            # per task: trials, best, speedup
    cm = tensorforge.compile(model, example_inputs, db="tune.sqlite")

The loop: extract the model's tasks, load what the database already knows about them (their
records count against ``trials``, so a second run with the same database does nothing), warm-start
the cost model from every record of this target, then until the budget or ``timeout_s`` is spent:
the scheduler picks a task, its search proposes a batch, the measurer builds and times it, the
batch goes to the database in one transaction and into the cost model.  Finally every task that got
new records is *confirmed*: the default and the best few candidates are re-timed together,
round-robin in one process, and the database keeps that outcome; compile applies a tuned config
only if it beat the default there by more than ``database.CONFIRM_MARGIN``.
"""
from __future__ import annotations

import math
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import TensorforgeError
from ..ir.builtin import FuncOp
from .budget import TuneBudget
from .database import CONFIRM_MARGIN, Confirmation, canonical_config
from .in_model import ProfiledBaseline, check_in_model, checkable
from .scheduler import TaskScheduler
from .search import SearchOptions, TaskSearch
from .space import DEFAULT, space_for
from .multi import ModelShares, single, union_tasks
from .tasks import KINDS, Task, lowered_module, tasks_of_function
from .transfer import transferred_configs


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
    best_config: dict | None              # what compile applies (None: the default)
    confirmed: float = math.nan           # applied config's confirmed speedup over the default; 1.0: default
                                          # kept; nan: never confirmed (a database from before confirmation)
    confirmed_now: bool = False           # the confirmation was made by this run
    models: tuple[str, ...] = ()          # the models that run this kernel (several in a multi-model tune)
    share: float = math.nan               # its share of all the models' latency, summed over models
    shape: str = ""                       # Task.shape_text(): tells apart tasks of one name

    def label(self, width: int = 1000) -> str:
        """The task column of the tables: the name and the shape in at most ``width`` characters
        (a long name is cut, the shape kept: it is what tells two tasks of one name apart)."""
        full = f"{self.name} {self.shape}".strip()
        if len(full) <= width:
            return full
        keep = max(1, width - len(self.shape) - 2)
        return f"{self.name[:keep]}~ {self.shape}"[:width]

    @property
    def decision(self) -> str:
        if not math.isfinite(self.confirmed):
            return "unconfirmed"
        return f"{self.confirmed:.3f}x" if self.best_config is not None else "default kept"

    @property
    def applied_s(self) -> float:
        """The latency compile gets, on the search's scale: the default's over the confirmed
        speedup when confirmed, else the search's best."""
        return self.default_s / self.confirmed if math.isfinite(self.confirmed) else self.best_s

    @property
    def speedup(self) -> float:
        return speedup(self.default_s, self.best_s)

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
    models: list[str] = field(default_factory=list)
    cluster: dict = field(default_factory=dict)           # a Ray tune: nodes, builds/s, measurements/s, lost
    measurements: list[dict] = field(default_factory=list)  # a Ray tune: node, task, start, end per batch
    run_trials: list[int] = field(default_factory=list)     # per task, filled by the cluster loop
    model_checks: list = field(default_factory=list)        # in_model.ModelCheck per tuned workload checked
    phases: dict = field(default_factory=dict)              # seconds of each step: "setup", "search", ...

    def model_estimate(self, which: str = "best_s") -> float:
        """Sum of weight x latency over the tasks (what the kernels cost per model run);
        ``which``: "default_s", "best_s" (the search's best) or "applied_s" (what compile applies)."""
        return weighted_total(self.tasks, which)

    def to_dict(self) -> dict:
        return {"target": self.target_key, "db": self.db_path, "trials": self.trials, "seconds": self.seconds,
                "stopped": self.stopped, "phases": self.phases, "models": self.models, "cluster": self.cluster,
                "measurements": self.measurements,
                "model_checks": [c.__dict__ for c in self.model_checks],
                "tasks": [dict(t.__dict__, speedup=t.speedup, gflops=t.gflops, decision=t.decision,
                               applied_s=t.applied_s)
                          for t in self.tasks]}

    def __str__(self) -> str:
        if len(self.models) > 1:
            return self._multi_table()
        tw = self._task_width()
        lines = [f"{'task':{tw}s} {'kind':9s} {'x':>3s} {'trials':>6s} {'records':>7s} {'default ms':>10s} "
                 f"{'best ms':>9s} {'GFLOP/s':>8s} {'speedup':>7s}  confirmed"]
        for t, label in zip(self.tasks, self._labels(tw)):
            lines.append(f"{label:{tw}s} {t.kind:9s} {t.weight:3d} {t.trials:6d} {t.records:7d} "
                         f"{shown(t.default_s * 1e3, 10, 3)} {shown(t.best_s * 1e3, 9, 3)} "
                         f"{shown(t.gflops, 8, 1)} {shown(t.speedup, 7, 2)}  {t.decision}")
        lines.append(self._footer())
        return "\n".join(lines)

    def _multi_table(self) -> str:
        """Several models: which models use each task and its share of all their latency (the
        scheduler's weight), then the usual columns."""
        width = max([6] + [len(", ".join(t.models)) for t in self.tasks])
        tw = self._task_width()
        lines = [f"{'task':{tw}s} {'kind':9s} {'models':{width}s} {'x':>3s} {'weight':>6s} {'trials':>6s} "
                 f"{'default ms':>10s} {'best ms':>9s} {'speedup':>7s}  confirmed"]
        for t, label in zip(self.tasks, self._labels(tw)):
            lines.append(f"{label:{tw}s} {t.kind:9s} {', '.join(t.models):{width}s} {t.weight:3d} "
                         f"{shown(t.share, 6, 3)} {t.trials:6d} {shown(t.default_s * 1e3, 10, 3)} "
                         f"{shown(t.best_s * 1e3, 9, 3)} {shown(t.speedup, 7, 2)}  {t.decision}")
        shared = sum(1 for t in self.tasks if len(t.models) > 1)
        lines.append(f"{len(self.tasks)} tasks for {len(self.models)} models ({', '.join(self.models)}), "
                     f"{shared} shared (tuned once); weight: share of all the models' latency")
        lines.append(self._footer())
        return "\n".join(lines)

    def _task_width(self) -> int:
        return min(48, max([4] + [len(t.label()) + 3 for t in self.tasks]))

    def _labels(self, width: int) -> list[str]:
        """Each task's label, numbered (``#2``...) where a name and shape still repeat (two kernels
        that differ only in an input, e.g. a 3x3 and a 1x1 conv with one output shape)."""
        counts: dict[str, int] = {}
        out = []
        for t in self.tasks:
            label = t.label(width - 3)
            counts[label] = counts.get(label, 0) + 1
            out.append(label if counts[label] == 1 else f"{label} #{counts[label]}")
        return out

    def _footer(self) -> str:
        lines = []
        d, b = self.model_estimate("default_s"), self.model_estimate("applied_s")
        if math.isfinite(d) and math.isfinite(b) and b > 0:
            estimate = f"kernels per model run: default {d * 1e3:.3f} ms, tuned {b * 1e3:.3f} ms ({d / b:.2f}x)"
        else:
            missing = sum(1 for t in self.tasks if not (math.isfinite(t.default_s) and math.isfinite(t.best_s)))
            estimate = f"{missing} of {len(self.tasks)} tasks not measured yet (more --trials): no model estimate"
        phases = ", ".join(f"{name} {sec:.1f} s" for name, sec in self.phases.items())
        lines.append(f"{self.trials} trials in {self.seconds:.1f} s{' (' + self.stopped + ')' if self.stopped else ''}"
                     f"{' (' + phases + ')' if phases else ''}; {estimate}; db {self.db_path}")
        if self.model_checks:
            kept = [c for c in self.model_checks if c.kept]
            lines.append(f"checked in the model: {len(self.model_checks)} tuned workloads, {len(kept)} kept "
                         f"(in-model speedups {', '.join(f'{c.speedup:.2f}x' for c in kept) or '-'}), "
                         f"{len(self.model_checks) - len(kept)} back to the default; the confirmed column is "
                         f"the in-model speedup for these")
        if self.cluster:
            c = self.cluster
            lines.append(f"cluster: {c.get('nodes', 0)} nodes ({c.get('measure_nodes', 0)} measuring), "
                         f"{c.get('builds_per_s', 0.0):.2f} builds/s, {c.get('measurements_per_s', 0.0):.2f} "
                         f"measurements/s, {c.get('lost', 0)} in-flight candidates lost and re-queued")
        return "\n".join(lines)


def speedup(default_s: float, best_s: float) -> float:
    """How many times faster the best is than the default (NaN while either is unmeasured)."""
    return default_s / best_s if math.isfinite(default_s) and best_s > 0 else math.nan


def weighted_total(rows, which: str) -> float:
    """Sum of ``row.weight x row.<which>`` (a latency: what the kernels cost per model run);
    NaN while any row is unmeasured."""
    vals = [r.weight * getattr(r, which) for r in rows]
    return sum(vals) if all(math.isfinite(v) for v in vals) else math.nan


def shown(value: float, width: int, digits: int) -> str:
    """``value`` right-aligned in ``width`` columns, or "-" when it was not measured (nan/inf)."""
    return f"{value:{width}.{digits}f}" if math.isfinite(value) else f"{'-':>{width}s}"


def open_db(db: Any):
    from .database import TuningDatabase
    if isinstance(db, TuningDatabase):
        return db, False
    return TuningDatabase(db), True


def _cost_model(database, target, target_key: str, spaces: dict, warm: bool = True):
    """The cost model every task's search shares (None if the module is missing): with ``warm``,
    the warm model of this target (``warm.py``: trained on the database's records of every
    workload, cached, retrained when the records grew); else trained on this run's tasks' own
    records only (a cold start)."""
    try:
        from .cost_model import CostModel
        from .features import gemm_features
        from .warm import warm_cost_model
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

    if warm:
        return warm_cost_model(database, target_key, featurize)
    model = CostModel()
    rows, secs, groups = [], [], []
    for key in spaces:
        w = next((w for w in database.workloads() if w.key == key), None)
        for r in database.records(key, target_key) if w is not None else ():
            x = featurize(w, r) if r.ok else None
            if x is not None:
                rows.append(x)
                secs.append(r.median_s)
                groups.append(key)
    if rows:
        model.fit(np.stack(rows), np.asarray(secs), np.asarray(groups))
    return model


def tasks_of_models(model: Any, example_inputs: Sequence | None, target, passes: Any = None,
                    kinds: Sequence[str] = KINDS, shapes: Any = None,
                    dynamic_shapes: Any = None) -> tuple[list[Task], ModelShares, list]:
    """The tasks to tune, who uses them, and the models lowered to kernels (for the model check;
    none for a list of tasks).  ``model``: anything ``compile`` takes, a list of ``Task``, or a
    dict ``{name: model}`` of several models (a value may be ``(model, example_inputs)``), whose
    tasks are united (``multi.py``)."""
    if isinstance(model, (list, tuple)) and model and all(isinstance(t, Task) for t in model):
        tasks = list(model)
        return tasks, single(tasks), []
    if isinstance(model, FuncOp):
        tasks = tasks_of_function(model, target, kinds)
        return tasks, single(tasks), []

    def lowered(m, inputs):
        return lowered_module(m, inputs, target, passes, shapes=shapes, dynamic_shapes=dynamic_shapes)
    if isinstance(model, dict):
        if not model:
            raise TensorforgeError("tune got an empty dict of models: pass at least one {name: model}")
        per_model, modules = {}, []
        for name, m in model.items():
            m, inputs = m if isinstance(m, tuple) and len(m) == 2 else (m, example_inputs)
            modules.append(lowered(m, inputs))
            per_model[str(name)] = tasks_of_function(modules[-1].main, target, kinds)
        return (*union_tasks(per_model), modules)
    module = lowered(model, example_inputs)
    tasks = tasks_of_function(module.main, target, kinds)
    return tasks, single(tasks), [module]


def tune(model: Any, example_inputs: Sequence | None = None, trials: int = 64, db: Any = None,
         timeout_s: float | None = None, progress: bool = True, *, batch_size: int = 8,
         per_task: int | None = None, kinds: Sequence[str] = KINDS, target=None, seed: int = 0,
         passes: Any = None, measurer=None, options: SearchOptions | None = None,
         confirm: ConfirmOptions | None = None, shapes: Any = None, dynamic_shapes: Any = None,
         cluster: Any = None, warm: bool = True, model_check: bool = True) -> TuneReport:
    """Tunes the kernels of ``model`` (anything ``compile`` takes, a list of ``Task``, or a dict
    ``{name: model or (model, example_inputs)}`` of several models tuned together: each shared
    kernel once, weighed by its share of all the models' latency, ``multi.py``).

    ``trials``: measured candidates for the whole model, records already in ``db`` included;
    ``db``: a path or ``TuningDatabase`` (None: the default database); ``timeout_s``: the whole
    call's budget in seconds: the search stops early enough to leave the confirmation and the
    model check the time they are estimated to take (``budget.py``); ``batch_size``: candidates
    per measured batch (one database transaction each); ``per_task``: at most this many records
    per task; ``kinds``: which tasks ("gemm", "conv", "depthwise", "int8", "blocked", "loop", "fusion"); ``measurer``: a
    ``measure.Measurer`` to use (else one is made); ``confirm``: the confirmation step
    (``ConfirmOptions(top=0)`` turns it off); ``shapes`` / ``dynamic_shapes``: as ``compile``
    takes them; ``cluster``: build and measure on a Ray cluster (an address, ``"local:N"`` for a
    throwaway local cluster of N worker nodes, or a ``distributed.Cluster``; docs/tuning.md,
    "Tuning on a Ray cluster"); ``warm``: rank new tasks with the warm cost model (``warm.py``;
    False: only this run's tasks' own records train it); ``model_check``: after the confirmation,
    time the tuned kernels inside the model against the default and keep a tuned config only
    where it wins there too (``in_model.py``; not for a list of tasks, a Ray cluster or a model
    over symbolic shapes).

    A model with symbolic dims (``dynamic_shapes``, or a graph whose ``main`` carries a symbol
    table) is tuned on its symbolic kernels: each is measured at the symbols' hints and its
    records apply to every size of the range (``tasks.py``).
    """
    if isinstance(target, str) and target in ("opencl", "cuda"):     # the GPU space (tune/gpu.py)
        from .gpu import tune_gpu
        return tune_gpu(model, example_inputs, target, trials, db, timeout_s, seed, passes=passes,
                        progress=progress)
    from ..codegen.target import Target
    from ..progress import Progress
    from .measure import Measurer
    if trials < 0 or batch_size < 1:
        raise TensorforgeError(f"tune needs trials >= 0 and batch_size >= 1 (got {trials}, {batch_size})")
    session = None
    if cluster is not None:          # fail on a missing ray or a bad address before any work
        from .distributed import open_cluster
        session = open_cluster(cluster)
    confirm = confirm or ConfirmOptions()
    budget = TuneBudget.of(timeout_s, confirm)
    target = target or Target.host()
    target_key = target.key()
    database = None
    own_db = False
    own_measurer = measurer is None
    try:
        tasks, shares, lowered = tasks_of_models(model, example_inputs, target, passes, kinds, shapes, dynamic_shapes)
        database, own_db = open_db(db)
        report = TuneReport(target_key, str(getattr(database, "path", db)), models=list(shares.models))
        for t in tasks:
            database.add_workload(t.workload())
        spaces = {t.key: space_for(t, target) for t in tasks}
        searches = []
        for i, t in enumerate(tasks):
            s = TaskSearch(t, spaces[t.key], None, rng=random.Random(seed * 7919 + i), options=options or SearchOptions())
            s.load(database.records(t.key, target_key))
            searches.append(s)
        existing = [len(s.measured) for s in searches]
        cores = getattr(target, "cores", 1)
        sched = TaskScheduler(shares.weights(tasks, [s.best_s for s in searches], cores), trials, per_task, existing,
                              [s.best_s for s in searches])
        run_trials = [0] * len(tasks)
        cost = None
        baselines = {}
        if model_check and session is None and timeout_s is not None and sched.remaining > 0:
            # the model check's untuned build, now: its build time sizes the budget's reserve
            baselines = {id(m): ProfiledBaseline(m, target) for m in lowered if checkable(m)}
            budget.model_check_s = sum(b.check_s() for b in baselines.values())
        report.phases["setup"] = budget.elapsed()
        if sched.remaining > 0:          # nothing to tune: no model to train, no runner to start
            cost = _cost_model(database, target, target_key, spaces, warm)
            known = database.workloads() if warm else []
            for s in searches:
                s.model = cost
                if warm:
                    s.transfer = transferred_configs(database, s.task, target_key, workloads=known)
        if session is not None:
            from .distributed.driver import run_trials_on_cluster
            measurer = session.measurer(target)
            own_measurer = True
            if sched.remaining > 0:
                run_trials_on_cluster(session, tasks, searches, sched, shares, database, target_key, cost,
                                      batch_size, budget, report, progress)
            run_trials = list(report.run_trials) or run_trials
        else:
            with Progress(f"tuning {len(tasks)} tasks", total=sched.remaining, enabled=progress) as bar:
                while True:
                    i = sched.next_task()
                    if budget.search_over(run_trials, task=i):     # at the chosen task's pace, if slower
                        report.stopped = "time budget"
                        break
                    if i is None:
                        break
                    s, t = searches[i], tasks[i]
                    configs = s.next_batch(sched.allowance(i, batch_size))
                    if not configs:
                        sched.observe(i, 0, s.best_s, exhausted=True)
                        continue
                    if measurer is None:
                        measurer = Measurer(target)
                    batch_start = time.perf_counter()
                    results = measurer.measure(t, configs)
                    budget.observe_batch(time.perf_counter() - batch_start, task=i)
                    s.commit(results, database, target_key)
                    learn(cost, s, t, results)
                    sched.observe(i, len(results), s.best_s, exhausted=s.exhausted)
                    sched.set_weights(shares.weights(tasks, [x.best_s for x in searches], cores))
                    run_trials[i] += len(results)
                    bar.advance(len(results), note=_note(t, s, budget))
        report.phases["search"] = budget.elapsed() - report.phases["setup"]
        # A measurer without ``confirm`` (a test's stand-in that only measures) skips the step.
        can_confirm = confirm.top > 0 and (measurer is None or hasattr(measurer, "confirm"))
        due = [i for i, (t, s) in enumerate(zip(tasks, searches))
               if can_confirm and needs_confirmation(database, t.key, target_key, run_trials[i] > 0)
               and len(confirm_candidates(s, confirm.top)) > 1]
        confirmed_now = set()
        with Progress(f"confirming {len(due)} tasks against the default", total=len(due),
                      enabled=progress and bool(due), log_every_s=0.0) as bar:
            for i in due:
                if measurer is None:
                    measurer = Measurer(target)
                conf = confirm_task(measurer, database, tasks[i], searches[i], target_key, confirm)
                confirmed_now.add(i)
                bar.advance(1, note=f"{tasks[i].name}: {_decision(conf, confirm.margin)}")
        report.phases["confirmation"] = budget.elapsed() - sum(report.phases.values())
        if model_check and due and session is None:
            with Progress(f"checking tuned kernels in {len(lowered)} model(s)", total=len(lowered),
                          enabled=progress and bool(lowered), log_every_s=0.0) as bar:
                for module in lowered:
                    report.model_checks += check_in_model(module, database, target, tasks, confirm.margin,
                                                          baseline=baselines.get(id(module)))
                    bar.advance(1)
        report.phases["model check"] = budget.elapsed() - sum(report.phases.values())
        task_shares = shares.shares(tasks, [s.best_s for s in searches], cores)
        for i, (t, s, n) in enumerate(zip(tasks, searches, run_trials)):
            rec = database.best(t.key, target_key, margin=confirm.margin)
            conf = database.confirmation(t.key, target_key)
            applied = rec.config if rec is not None else None
            speedup = math.nan
            if conf is not None:
                speedup = dict(zip(map(canonical_config, conf.configs), conf.speedups)).get(
                    canonical_config(applied), math.nan) if applied is not None else 1.0
            report.tasks.append(TaskReport(t.name, t.key, t.kind, t.weight, t.flops, n,
                                           database.count(t.key, target_key), s.default_s(), s.best_s,
                                           applied, speedup, i in confirmed_now,
                                           models=tuple(shares.users(t.key)), share=task_shares[i],
                                           shape=t.shape_text()))
        report.trials = sum(run_trials)
    finally:
        if own_measurer and measurer is not None:
            measurer.close()
        if own_db and database is not None:
            database.close()
        if session is not None:
            session.close()
    report.seconds = budget.elapsed()
    return report


def learn(cost, search: TaskSearch, task: Task, results) -> None:
    """Feeds a measured batch to the shared cost model."""
    learned = search.features_of(results) if cost is not None else None
    if learned is not None:
        cost.update(learned[0], learned[1], [task.key] * len(learned[1]))


@dataclass
class ConfirmOptions:
    """The confirmation step: the default and the ``top`` best measured configs of a task re-timed
    round-robin in one runner process, ``rounds`` rounds of calls lasting ``min_repeat_s`` each;
    compile applies a config only if its median per-round speedup over the default exceeds
    ``1 + margin``.  ``clock``: "wall" (perf_counter) or "cpu" (process CPU time / threads); see
    docs/tuning.md for why wall is the default."""

    top: int = 3
    rounds: int = 9
    min_repeat_s: float = 0.05
    margin: float = CONFIRM_MARGIN
    clock: str = "wall"


def needs_confirmation(database, key: str, target_key: str, new_records: bool) -> bool:
    """A task is confirmed when this run measured something for it, or when records were added
    after its last confirmation (a run killed before confirming).  A task of an older database
    that was never confirmed and got nothing new keeps today's rule: no runner is started."""
    if new_records:
        return True
    conf = database.confirmation(key, target_key)
    return conf is not None and conf.records != database.count(key, target_key)


def confirm_candidates(search: TaskSearch, top: int) -> list[dict]:
    """The default, then up to ``top`` of the fastest distinct configs the search measured: first
    the fastest of each thread count, then the next fastest.  Load from other processes slows a
    kernel on all cores far more than a one-thread kernel, so under load the search's top few can
    all be one-thread configs that lose to the default once the load is gone; the fastest
    all-core config must get its chance too.  Empty when the default itself was never measured."""
    if not any(c.get("kind") == "default" for _, c in search.history):
        return []
    ranked, seen = [], {canonical_config(DEFAULT)}
    for _, config in sorted(search.history, key=lambda h: h[0]):
        key = canonical_config(config)
        if key not in seen:
            seen.add(key)
            ranked.append(config)
    firsts, groups = [], set()
    for config in ranked:
        group = (config.get("params") or {}).get("threads")
        if group not in groups:
            groups.add(group)
            firsts.append(config)
    rest = [c for c in ranked if not any(c is f for f in firsts)]
    return [DEFAULT] + (firsts + rest)[:top]


def confirm_task(measurer, database, task: Task, search: TaskSearch, target_key: str,
                 options: ConfirmOptions) -> Confirmation:
    """Re-times the task's default and best candidates together and stores the outcome."""
    if options.clock not in ("wall", "cpu"):
        raise TensorforgeError(f"confirmation clock must be 'wall' or 'cpu' (got {options.clock!r})")
    configs = confirm_candidates(search, options.top)
    timed = measurer.confirm(task, configs, rounds=options.rounds, min_repeat_s=options.min_repeat_s)
    conf = Confirmation(task.key, target_key, tuple(configs), tuple(map(tuple, timed[options.clock])),
                        options.clock, database.count(task.key, target_key))
    database.add_confirmation(conf)
    return conf


def _decision(conf: Confirmation, margin: float) -> str:
    winners = conf.winners(margin)
    return f"tuned {winners[0][1]:.3f}x the default" if winners else \
        f"default kept (best candidate {max(conf.speedups[1:]):.3f}x)"


def _note(t: Task, s: TaskSearch, budget: TuneBudget) -> str:
    gf = t.flops / s.best_s / 1e9 if math.isfinite(s.best_s) else 0.0
    left_s = budget.left_s(1)
    left = "" if left_s is None else f", {left_s:.0f} s of search left"
    return f"{t.name}: {len(s.measured)} trials, best {gf:.1f} GFLOP/s{left}"


def default_db_path() -> str:
    from .database import default_path
    return os.fspath(default_path())
