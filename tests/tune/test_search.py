"""Search and scheduling: batches are valid, new and deduplicated; the budget counts records already
in the database; a tune killed mid-run keeps every committed batch and loses at most the one in flight."""
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from tensorforge.codegen.target import Target
from tensorforge.tune.api import tune
from tensorforge.tune.database import TuningDatabase
from tensorforge.tune.measure import Result
from tensorforge.tune.scheduler import TaskScheduler
from tensorforge.tune.search import TaskSearch
from tensorforge.tune.space import canonical, space_for

from tests.tune.tune_util import stack_model, task_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class FakeMeasurer:
    """Times nothing: a config's 'latency' is a fixed function of its canonical text."""

    def __init__(self):
        self.calls = []

    def measure(self, task, configs):
        self.calls.append(len(configs))
        return [Result(c, (1e-3 * (1 + (hash(canonical(c)) % 97) / 97),)) for c in configs]

    def close(self):
        pass


class RankModel:
    """A stand-in cost model: prefers configs with a larger register tile (mr * nr)."""

    trained = True

    def predict(self, X):
        return np.asarray(X)[:, 0]


@pytest.fixture(scope="module")
def gemm_task():
    return task_of(*stack_model(rows=64, width=64), "gemm")


def test_batches_are_valid_new_and_seeds_come_first(gemm_task):
    task = gemm_task
    space = space_for(task, Target.host())
    search = TaskSearch(task, space, None, rng=random.Random(0))
    first = search.next_batch(4)
    assert first[0] == {"kind": "default"}
    assert [canonical(c) for c in first] == [canonical(c) for c in space.seeds()[:4]]
    search.commit([Result(c, (1e-3,)) for c in first], None, "t")
    seen = {canonical(c) for c in first}
    for _ in range(3):
        batch = search.next_batch(6)
        assert len(batch) == 6
        for c in batch:
            space.check(c)                       # never an illegal candidate
            assert canonical(c) not in seen      # never one measured before
            seen.add(canonical(c))
        search.commit([Result(c, (2e-3,)) for c in batch], None, "t")
    assert search.best_s == 1e-3 and search.default_s() == 1e-3


def test_the_cost_model_ranks_the_batch(gemm_task):
    task = gemm_task
    space = space_for(task, Target.host())
    space.features = lambda config, params: np.array([params.mr * params.nr if params else 0.0])
    search = TaskSearch(task, space, RankModel(), rng=random.Random(1))
    search.options.epsilon = 0.0
    search.commit([Result(c, (1e-3,)) for c in search.next_batch(len(space.seeds()))], None, "t")
    batch = search.next_batch(5)
    tiles = [c["params"]["mr"] * c["params"]["nr"] for c in batch]
    assert tiles == sorted(tiles, reverse=True)            # best predicted first
    pool = [space.sample(random.Random(i)) for i in range(200)]
    best_possible = max(c["params"]["mr"] * c["params"]["nr"] for c in pool)
    assert tiles[0] >= 0.75 * best_possible                # the evolution found the top of the space


def test_scheduler_budget_counts_existing_records_and_follows_the_gain():
    s = TaskScheduler([1, 10], budget=20, existing=[12, 8], best=[1e-3, 1e-3])
    assert s.remaining == 0 and s.next_task() is None      # a second run with the same db: no trials
    s = TaskScheduler([1, 10, 1], budget=30)
    order = [s.next_task() for _ in range(1)]
    assert order == [0]                                    # every task gets a first round, in order
    for i in range(3):
        s.observe(i, 4, 1e-3)
    assert s.remaining == 18
    assert s.next_task() == 1                              # weight 10: the largest end-to-end share
    s.observe(1, 4, 1e-3, exhausted=True)
    assert s.next_task() in (0, 2)
    capped = TaskScheduler([1], budget=100, per_task=6)
    assert capped.allowance(0, 8) == 6
    capped.observe(0, 6, 1e-3)
    assert capped.next_task() is None


def test_tune_commits_batches_and_resumes_without_duplicates(tmp_path, gemm_task):
    tasks = [gemm_task]
    db = str(tmp_path / "t.sqlite")
    fake = FakeMeasurer()
    r1 = tune(tasks, trials=10, db=db, measurer=fake, batch_size=4, progress=False)
    assert r1.trials == 10 and fake.calls == [4, 4, 2]
    with TuningDatabase(db) as d:
        assert d.count(tasks[0].key, Target.host().key()) == 10
    r2 = tune(tasks, trials=10, db=db, measurer=fake, batch_size=4, progress=False)
    assert r2.trials == 0 and fake.calls == [4, 4, 2]      # same db, same budget: nothing measured
    r3 = tune(tasks, trials=14, db=db, measurer=fake, batch_size=4, progress=False)
    assert r3.trials == 4
    with TuningDatabase(db) as d:
        configs = [canonical(r.config) for r in d.records(tasks[0].key)]
    assert len(configs) == 14 and len(set(configs)) == 14  # no config measured twice across runs


_KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {root!r})
    from tensorforge.tune.api import tune
    from tensorforge.tune.measure import Result
    from tests.tune.tune_util import stack_model, task_of

    class Slow:
        def measure(self, task, configs):
            time.sleep(0.5)
            return [Result(c, (1e-3,)) for c in configs]
        def close(self):
            pass

    task = task_of(*stack_model(rows=64, width=64), "gemm")
    print("ready", flush=True)
    tune([task], trials=400, db=sys.argv[1], measurer=Slow(), batch_size=4, progress=False)
""")


def test_a_killed_tune_loses_at_most_the_batch_in_flight(tmp_path):
    script = tmp_path / "slow_tune.py"
    script.write_text(_KILL_SCRIPT.format(root=ROOT))
    db = str(tmp_path / "k.sqlite")
    TuningDatabase(db).close()          # exists before the writer starts, so the poll can open it read-only
    proc = subprocess.Popen([sys.executable, str(script), db], stdout=subprocess.PIPE, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 60
        count = 0
        while time.monotonic() < deadline:
            with TuningDatabase(db, readonly=True) as d:
                count = d.count()
            if count >= 8:
                break
            time.sleep(0.05)
        assert 8 <= count < 400, "the tune did not commit two batches in time"
        time.sleep(0.25)                                   # now inside the next batch's measurement
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with TuningDatabase(db) as d:
        after = d.count()
        records = [r for w in d.workloads() for r in d.records(w.key)]
    assert after >= count and after % 4 == 0               # whole batches only
    assert all(r.ok for r in records)
