"""A tune's ``timeout_s`` covers the whole call: the search leaves the confirmation and the model
check the time they are estimated to take (``tune/budget.py``), and the report says where the
time went."""
import math
import time

import pytest

import tensorforge
from tensorforge.tune import in_model
from tensorforge.tune.api import ConfirmOptions
from tensorforge.tune.budget import TuneBudget


def test_the_reserve_holds_the_confirmations_and_the_model_check():
    budget = TuneBudget(10.0, time.perf_counter() - 5.0, confirm_task_s=1.0, model_check_s=2.0)
    assert budget.reserve_s(3) == 5.0 and budget.reserve_s(0) == 0.0      # no confirmation: no model check
    assert not budget.search_over([3, 0, 5])                              # 5 + 4 of 10 s: two tasks to confirm
    assert budget.search_over([1, 2, 1, 1])                               # 5 + 6
    assert budget.search_over([0, 0]) == budget.search_over([1])          # one task kept in reserve at least
    assert budget.left_s(2) == pytest.approx(1.0, abs=0.05)
    budget.observe_batch(2.0)                                             # the next batch would end late
    assert budget.search_over([3, 0, 5])
    budget.observe_batch(0.0)
    assert budget.batch_s == 1.0                                          # a running mean
    assert not TuneBudget(None, 0.0).search_over([1] * 100) and TuneBudget(None, 0.0).left_s() is None


def test_a_task_whose_batches_run_long_is_not_started_late():
    """The search's mean pace hides one slow task (EfficientNet-B0's 112x112 layers at batch 8:
    batches of 22-36 s among batches of a few); the check for a chosen task uses the slower pace."""
    budget = TuneBudget(20.0, time.perf_counter() - 10.0, confirm_task_s=1.0, model_check_s=2.0)
    for seconds in (1.0, 1.0, 1.0):
        budget.observe_batch(seconds, task=0)
    budget.observe_batch(6.0, task=1)
    budget.observe_batch(6.0, task=1)
    assert budget.task_batch_s == {0: 1.0, 1: 6.0}
    assert budget.batch_s == pytest.approx(4.75)                          # running mean of the five
    assert not budget.search_over([1, 1])                                 # 10 + 4.75 + 4 of 20 s
    assert not budget.search_over([1, 1], task=0)                         # its own 1 s: the mean decides
    assert budget.search_over([1, 1], task=1)                             # 10 + 6 + 4
    assert not budget.search_over([1, 1], task=2)                         # not run yet: the mean


def test_a_confirmation_is_estimated_from_its_options():
    assert TuneBudget.of(60, ConfirmOptions(top=3, rounds=9, min_repeat_s=0.05)).confirm_task_s == pytest.approx(1.8)
    assert TuneBudget.of(60, ConfirmOptions(top=0)).confirm_task_s == 0.0


def test_the_search_stops_where_the_model_check_would_overrun(graph, tmp_path, monkeypatch):
    """The untuned profiled build is made first; when the check it prices does not fit the budget
    the search measures nothing, and the phases add up to the run."""
    made = []

    class Baseline(in_model.ProfiledBaseline):
        def __init__(self, lowered, target):
            super().__init__(lowered, target)
            made.append(self)

        def check_s(self, rounds: int = in_model.ROUNDS, runs: int = in_model.RUNS) -> float:
            return 1e6

    monkeypatch.setattr("tensorforge.tune.api.ProfiledBaseline", Baseline)
    report = tensorforge.tune(graph, trials=6, db=str(tmp_path / "t.sqlite"), progress=False, batch_size=3,
                              kinds=("loop",), timeout_s=600)
    assert len(made) == 1 and made[0].build_s > 0 and made[0].latency_s > 0
    assert report.trials == 0 and report.stopped == "time budget"
    assert set(report.phases) == {"setup", "search", "confirmation", "model check"}
    assert sum(report.phases.values()) == pytest.approx(report.seconds, abs=0.5)
    assert "(setup " in str(report) and "model check " in str(report)


def test_without_a_budget_nothing_is_built_ahead(graph, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the baseline is built ahead only for a budget")
    monkeypatch.setattr("tensorforge.tune.api.ProfiledBaseline", refuse)
    report = tensorforge.tune(graph, trials=3, db=str(tmp_path / "t.sqlite"), progress=False, batch_size=3,
                              kinds=("loop",))
    assert report.trials == 3 and not report.stopped and math.isfinite(report.seconds)


def test_a_cached_library_says_what_its_build_took(tmp_path, monkeypatch):
    from tensorforge.codegen.c.toolchain import compile_c
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path))
    src = "int tf_budget_probe(int x) { return x + 1; }\n"
    built = compile_c(src, name="probe")
    again = compile_c(src, name="probe")
    assert not built.cache_hit and again.cache_hit
    assert built.build_seconds() > 0 and again.build_seconds() == pytest.approx(built.build_seconds(), abs=1e-3)
