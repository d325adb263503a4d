"""The confirmation step: a tuned config is applied only when it beat the default, re-timed beside
it, by more than the margin; the decision is stored, a rerun reproduces it without measuring, and
databases written before confirmations existed keep the old rule.

Timings come from a stand-in measurer (fixed numbers, no timing asserts); compile builds for real."""
import sqlite3

import pytest

import tensorforge
from tensorforge.codegen.target import Target
from tensorforge.errors import TuningDatabaseError
from tensorforge.tune.api import ConfirmOptions, confirm_candidates
from tensorforge.tune.database import CONFIRM_MARGIN, Confirmation, Record, TuningDatabase, canonical_config
from tensorforge.tune.measure import Result
from tensorforge.tune.search import TaskSearch
from tensorforge.tune.space import DEFAULT, space_for

from tests.tune.tune_util import task_of

TARGET = Target.host().key()
ROUNDS = 9


class FixedMeasurer:
    """Search timings flatter every candidate (half the default's time, as a loaded machine can);
    the confirmation gives the k-th config ``speedup(config, k)`` over the default in every round, on a
    round-to-round drift that the paired ratios must cancel."""

    def __init__(self, speedup):
        self.speedup = speedup
        self.measured = 0
        self.confirmed: list[list[dict]] = []

    def measure(self, task, configs):
        self.measured += len(configs)
        return [Result(c, (2e-3,) if c.get("kind") == "default" else
                       (1e-3 * (1 + (hash(canonical_config(c)) % 97) / 970),)) for c in configs]

    def confirm(self, task, configs, rounds=ROUNDS, min_repeat_s=0.05):
        self.confirmed.append(list(configs))
        base = [1e-3 * (1 + 0.5 * (r % 3)) for r in range(rounds)]      # load that comes and goes
        wall = [[b / self.speedup(c, k) for b in base] for k, c in enumerate(configs)]
        return {"wall": wall, "cpu": wall}

    def close(self):
        pass


@pytest.fixture(scope="module")
def task(model):
    return task_of(*model, "gemm")


def _tuned_kernels(graph, db) -> int:
    return tensorforge.compile(graph, db=db).native.build["tuned_kernels"]


def test_speedup_is_the_median_of_per_round_ratios():
    c = Confirmation("w", "t", (DEFAULT, {"kind": "gemm", "params": {"mr": 4}}),
                     ((1.0, 2.0, 3.0), (0.5, 2.0, 1.0)))
    assert c.speedups == (1.0, 2.0)                 # ratios 2, 1, 3 -> median 2
    assert c.winners() == [(c.configs[1], 2.0)]
    tie = Confirmation("w", "t", c.configs, ((1.0, 1.0, 1.0), (1.0 / 1.01,) * 3))
    assert tie.winners(margin=CONFIRM_MARGIN) == []  # 1% faster: within the margin, default kept
    assert tie.winners(margin=0.005)[0][1] == pytest.approx(1.01)


def test_a_candidate_that_did_not_beat_the_default_is_not_applied(graph, task, tmp_path):
    db = str(tmp_path / "lose.sqlite")
    fake = FixedMeasurer(lambda c, k: 1.0 if c.get("kind") == "default" else 1.01)   # within the margin
    report = tensorforge.tune([task], trials=8, db=db, measurer=fake, batch_size=4, progress=False)
    assert fake.measured == 8 and len(fake.confirmed) == 1
    assert fake.confirmed[0][0] == DEFAULT and len(fake.confirmed[0]) == 4          # default + top 3
    row = report.tasks[0]
    assert row.speedup > 1.5                         # the search's numbers said "much faster" ...
    assert row.best_config is None and row.decision == "default kept" and row.confirmed == 1.0
    assert "default kept" in str(report)
    assert report.model_estimate("applied_s") == report.model_estimate("default_s")   # the estimate follows
    with TuningDatabase(db, readonly=True) as d:
        assert d.best(task.key, TARGET) is None      # ... the confirmation says no: compile uses the default
        assert d.best(task.key, TARGET, margin=0.0) is not None    # 1% faster does beat a zero margin
    assert _tuned_kernels(graph, db) == 0


def test_a_confirmed_winner_is_applied_and_a_rerun_keeps_the_decision(graph, task, tmp_path):
    db = str(tmp_path / "win.sqlite")
    # The second candidate re-timed (not the search's fastest) is the real winner.
    fake = FixedMeasurer(lambda c, k: {2: 1.25}.get(k, 1.0 if k == 0 else 0.9))
    first = tensorforge.tune([task], trials=8, db=db, measurer=fake, batch_size=4, progress=False)
    winner = canonical_config(fake.confirmed[0][2])
    row = first.tasks[0]
    assert canonical_config(row.best_config) == winner and row.confirmed == pytest.approx(1.25)
    assert row.confirmed_now and row.decision == "1.250x"
    with TuningDatabase(db, readonly=True) as d:
        assert canonical_config(d.best(task.key, TARGET).config) == winner
    assert _tuned_kernels(graph, db) == 1

    again = tensorforge.tune([task], trials=8, db=db, measurer=fake, batch_size=4, progress=False)
    assert again.trials == 0 and fake.measured == 8 and len(fake.confirmed) == 1    # nothing measured or re-timed
    assert canonical_config(again.tasks[0].best_config) == winner and not again.tasks[0].confirmed_now
    assert again.tasks[0].confirmed == pytest.approx(1.25)


def test_records_added_after_a_confirmation_are_confirmed_by_the_next_run(task, tmp_path):
    """A run killed between its last batch and the confirmation left records the confirmation has
    not seen: the next run, with nothing left to measure, confirms again."""
    db = str(tmp_path / "stale.sqlite")
    fake = FixedMeasurer(lambda c, k: 1.0 if c.get("kind") == "default" else 0.8)
    tensorforge.tune([task], trials=4, db=db, measurer=fake, batch_size=4, progress=False)
    assert len(fake.confirmed) == 1
    extra = space_for(task, Target.host()).seeds()[-1]
    with TuningDatabase(db) as d:
        assert canonical_config(extra) not in d.measured_configs(task.key, TARGET)
        d.add_records([Record(task.key, TARGET, extra, (1e-4,))])         # the fastest median now
        assert d.best(task.key, TARGET) is None     # the old confirmation still decides: default
    report = tensorforge.tune([task], trials=5, db=db, measurer=fake, batch_size=4, progress=False)
    assert report.trials == 0 and len(fake.confirmed) == 2
    assert canonical_config(extra) in map(canonical_config, fake.confirmed[1])
    assert report.tasks[0].decision == "default kept"


def _old_database(path, task, config) -> None:
    """A file as tensorforge wrote it before confirmations: records only, no confirmations table."""
    with TuningDatabase(path) as d:
        d.add_workload(task.workload())
        d.add_records([Record(task.key, TARGET, DEFAULT, (1e-3,)), Record(task.key, TARGET, config, (1e-6,))])
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE confirmations")


def test_an_old_database_without_confirmations_keeps_the_old_rule(graph, task, tmp_path):
    db = str(tmp_path / "old.sqlite")
    config = space_for(task, Target.host()).seeds()[1]
    _old_database(db, task, config)
    with TuningDatabase(db, readonly=True) as d:     # read-only: no table is created, none is needed
        assert d.confirmation(task.key, TARGET) is None and d.confirmations() == []
        assert d.best(task.key, TARGET).config == config
    assert _tuned_kernels(graph, db) == 1             # the fastest record is applied, as before
    fake = FixedMeasurer(lambda c, k: 1.0)
    report = tensorforge.tune([task], trials=2, db=db, measurer=fake, progress=False)
    assert report.trials == 0 and fake.confirmed == []          # nothing new: nothing re-timed
    assert report.tasks[0].decision == "unconfirmed" and report.tasks[0].best_config == config
    with TuningDatabase(db, readonly=True) as d:      # the writable open added the table, empty
        assert d.confirmations() == [] and d.best(task.key, TARGET).config == config


def test_confirmations_travel_in_json_lines(task, tmp_path):
    src = TuningDatabase(tmp_path / "a.sqlite")
    tuned = space_for(task, Target.host()).seeds()[1]
    src.add_records([Record(task.key, TARGET, DEFAULT, (1e-3,)), Record(task.key, TARGET, tuned, (9e-4,))])
    src.add_confirmation(Confirmation(task.key, TARGET, (DEFAULT, tuned), ((1e-3,) * 3, (8e-4,) * 3), records=2))
    src.export_jsonl(tmp_path / "a.jsonl")
    dst = TuningDatabase(tmp_path / "b.sqlite")
    assert dst.import_jsonl(tmp_path / "a.jsonl") == 3            # 2 records + 1 confirmation
    assert dst.import_jsonl(tmp_path / "a.jsonl") == 0
    assert dst.confirmation(task.key, TARGET) == src.confirmation(task.key, TARGET)
    assert dst.confirmation(task.key, TARGET).speedups[1] == pytest.approx(1.25)
    assert dst.best(task.key, TARGET).config == tuned
    with pytest.raises(TuningDatabaseError, match="first config must be the default"):
        dst.add_confirmation(Confirmation(task.key, TARGET, (tuned, DEFAULT), ((1.0,), (1.0,))))
    src.close()
    dst.close()


def test_candidates_include_the_fastest_of_each_thread_count(task):
    """Under load the search's top few can all be one-thread configs; the best all-core one is
    re-timed too."""
    search = TaskSearch(task, space_for(task, Target.host()))
    one = [{"kind": "gemm", "params": {"mr": m, "threads": 1}} for m in (2, 4, 6)]
    many = {"kind": "gemm", "params": {"mr": 8, "threads": 2}}
    search.history = [(3e-3, DEFAULT), (1e-3, one[0]), (1.1e-3, one[1]), (1.2e-3, one[2]), (2e-3, many)]
    assert confirm_candidates(search, 3) == [DEFAULT, one[0], many, one[1]]
    assert confirm_candidates(search, 1) == [DEFAULT, one[0]]
    search.history = search.history[1:]               # no measured default: nothing to compare with
    assert confirm_candidates(search, 3) == []
    assert ConfirmOptions().clock == "wall"


def test_the_runner_times_a_confirmation_on_both_clocks(task):
    """The real path: both configs built and re-timed round-robin in one runner process."""
    from tensorforge.tune.measure import Measurer
    configs = [DEFAULT, space_for(task, Target.host()).seeds()[1]]
    with Measurer(timeout_s=60) as m:
        timed = m.confirm(task, configs, rounds=3, min_repeat_s=0.001)
    assert set(timed) == {"wall", "cpu"}
    for clock in ("wall", "cpu"):
        assert len(timed[clock]) == 2 and all(len(row) == 3 and min(row) > 0 for row in timed[clock])
    c = Confirmation(task.key, TARGET, tuple(configs), timed["wall"])
    assert c.speedups[0] == 1.0 and c.speedups[1] > 0
