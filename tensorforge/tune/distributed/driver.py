"""The driver loop of a tune on a Ray cluster.

The local loop (``api.tune``) measures one batch at a time.  Here every measuring node has one
batch in flight: its candidates build as Ray tasks on any node, and the node's actor times them
once all are built.  When a batch comes back, the driver does what the local loop does, in the
same order: ``TaskSearch.commit`` (one database transaction for the batch, with its feature rows),
the cost model's update, ``TaskScheduler.observe``, and the next batch for that node.  Only the
driver touches the SQLite file.

Proposals account for what is in flight: a proposed batch's configs join the task's ``measured``
set at once (so a concurrent batch of the same task proposes others) and ``TaskScheduler.
dispatched`` reserves its trials.  A batch whose node or builds are lost (Ray reports the actor or
an object gone) is re-queued, the same configs, to the next free node: a lost node costs only
the work it had in flight.  A batch lost ``MAX_ATTEMPTS`` times is given up (its trials return to
the budget) so that a cluster that keeps failing ends the tune instead of looping.
"""
from __future__ import annotations

import collections
import time
from dataclasses import dataclass

from ...errors import TensorforgeError
from ..space import canonical
from .session import MeasurePool, is_lost

MAX_ATTEMPTS = 3
WAIT_S = 0.5                 # how long one wait for a finished batch blocks (the progress bar's tick)
REFRESH_S = 5.0              # how often new nodes are looked for


@dataclass
class _Job:
    task: int
    configs: list[dict]
    attempts: int = 0
    node: str = ""


class _Rates:
    """Builds and measured candidates per second over the run, for the progress bar and report."""

    def __init__(self):
        self.start = time.perf_counter()
        self.builds = 0
        self.measured = 0

    def per_s(self, n: int) -> float:
        return n / max(time.perf_counter() - self.start, 1e-9)


def run_trials_on_cluster(session, tasks, searches, sched, shares, database, target_key: str, cost,
                          batch_size: int, budget, report, progress: bool) -> None:
    """Spends ``sched``'s budget on the cluster, stopping as ``budget`` (``tune.budget.TuneBudget``)
    says; fills ``report.run_trials``, ``.measurements`` and ``.cluster``."""
    from ...progress import Progress
    from ..api import _note, learn
    ray = session.ray
    pool = _pool_of(session)
    pool.require()
    cores = getattr(pool.target, "cores", 1)
    run_trials = [0] * len(tasks)
    inflight: dict = {}                                  # object ref -> _Job
    requeue: collections.deque[_Job] = collections.deque()
    rates = _Rates()
    lost = 0
    last_refresh = time.monotonic()
    stopped = False
    with Progress(f"tuning {len(tasks)} tasks on Ray", total=sched.remaining, enabled=progress) as bar:
        while True:
            if not stopped and budget.search_over(run_trials):
                report.stopped, stopped = "time budget", True
            if time.monotonic() - last_refresh > REFRESH_S:
                pool.refresh()
                last_refresh = time.monotonic()
            busy = {job.node for job in inflight.values()}
            for node in [n for n in pool.actors if n not in busy]:
                job = requeue.popleft() if requeue else (None if stopped else _propose(sched, searches, batch_size))
                if job is None:
                    break
                job.node = node
                job.attempts += 1
                inflight[pool.submit(node, tasks[job.task], job.configs)] = job
            if not inflight:
                if requeue and pool.refresh() == 0:
                    raise TensorforgeError("every measuring node of the Ray cluster was lost: the batches in "
                                           "flight were not measured; start nodes of the target and tune again")
                if not requeue:
                    break
                continue
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=WAIT_S)
            for ref in ready:
                job = inflight.pop(ref)
                try:
                    out = ray.get(ref)
                except Exception as exc:       # noqa: BLE001 - a lost node: re-queue its batch
                    if not is_lost(exc):
                        raise
                    lost += len(job.configs)
                    pool.drop(job.node)
                    if job.attempts < MAX_ATTEMPTS:
                        requeue.append(job)
                    else:
                        sched.observe(job.task, 0, searches[job.task].best_s, dispatched=len(job.configs))
                    continue
                i, s, t = job.task, searches[job.task], tasks[job.task]
                results = out["results"]
                s.commit(results, database, target_key)
                learn(cost, s, t, results)
                sched.observe(i, len(results), s.best_s, exhausted=s.exhausted, dispatched=len(job.configs))
                sched.set_weights(shares.weights(tasks, [x.best_s for x in searches], cores))
                run_trials[i] += len(results)
                rates.builds += len(out["builds"])
                rates.measured += len(results)
                report.measurements.append({"node": out["node"], "host": out.get("host", ""), "pid": out["pid"],
                                            "task": t.name,
                                            "candidates": len(results), "start": out["start"], "end": out["end"],
                                            "builds": out["builds"]})
                bar.advance(len(results), note=f"{len(pool.actors)} nodes, {rates.per_s(rates.builds):.2f} builds/s, "
                                               f"{rates.per_s(rates.measured):.2f} measurements/s; "
                                               + _note(t, s, budget))
    report.run_trials = run_trials
    report.cluster = {"address": session.address, "nodes": len(session.nodes()), "measure_nodes": len(pool.actors),
                      "lost_nodes": len(pool.lost_nodes), "lost": lost,
                      "builds_per_s": rates.per_s(rates.builds), "measurements_per_s": rates.per_s(rates.measured)}


def _propose(sched, searches, batch_size: int) -> _Job | None:
    """The scheduler's next batch, reserved; None when the budget is spent (or nothing is left)."""
    while True:
        i = sched.next_task()
        if i is None:
            return None
        s = searches[i]
        configs = s.next_batch(sched.allowance(i, batch_size))
        if not configs:
            sched.observe(i, 0, s.best_s, exhausted=True)
            continue
        for c in configs:
            s.measured.add(canonical(c))
        sched.dispatched(i, len(configs))
        return _Job(i, configs)


def _pool_of(session) -> MeasurePool:
    pool = getattr(session, "pool", None)
    if pool is None:
        raise TensorforgeError("internal: the cluster session has no measuring pool")
    return pool


def overlaps(measurements: list[dict], within: str = "node") -> list[tuple[dict, dict]]:
    """Pairs of measurements on one node (``within="host"``: on one machine) whose [start, end]
    windows overlap (should be none)."""
    by_node: dict[str, list[dict]] = collections.defaultdict(list)
    for m in measurements:
        by_node[m[within]].append(m)
    bad = []
    for ms in by_node.values():
        ms = sorted(ms, key=lambda m: m["start"])
        for a, b in zip(ms, ms[1:]):
            if b["start"] < a["end"]:
                bad.append((a, b))
    return bad


__all__ = ["MAX_ATTEMPTS", "overlaps", "run_trials_on_cluster"]
