"""Measurement: a candidate that crashes, hangs, computes garbage or does not compile costs one
trial; the candidates after it are measured normally."""
import pytest

from tensorforge.runtime.native import ENTRY
from tensorforge.tune.measure import Measurer
from tensorforge.tune.space import DEFAULT

from tests.tune.tune_util import stack_model, task_of

_FAULTS = {
    "crash": "abort();",
    "hang": "for (volatile int spin = 0; ; spin++) {}",
    "wrong": None,                          # handled below: corrupts the first output element
    "syntax": "this is not C;",
}


class FaultyMeasurer(Measurer):
    """Injects a fault into the entry function of configs that ask for one."""

    def generate(self, task, config):
        src, layout = super().generate(task, {k: v for k, v in config.items() if k != "fault"})
        fault = config.get("fault")
        if fault:
            head = f"void {ENTRY}("
            at = src.index("{", src.index(head)) + 1
            if fault == "wrong":
                end = src.rindex("}")
                src = src[:end] + "  ((float*)outputs[0])[0] += 1000.0f;\n" + src[end:]
            else:
                src = src[:at] + f"\n  {_FAULTS[fault]}\n" + src[at:]
        return src, layout


@pytest.fixture(scope="module")
def task():
    return task_of(*stack_model(rows=8, width=16), "loop")


def test_faulty_candidates_cost_one_trial_each(task):
    configs = [dict(DEFAULT, fault=f) for f in ("crash", "wrong", "hang", "syntax")] + [DEFAULT]
    configs.insert(2, DEFAULT)              # a good one between the bad ones
    with FaultyMeasurer(repeats=2, min_repeat_s=0.0, timeout_s=4) as m:
        results = m.measure(task, configs)
    by_fault = {r.config.get("fault", f"ok{i}"): r for i, r in enumerate(results)}
    assert len(results) == len(configs)
    assert "died" in by_fault["crash"].error and "signal 6" in by_fault["crash"].error
    assert by_fault["wrong"].error.startswith("wrong output")
    assert "no result within" in by_fault["hang"].error
    assert by_fault["syntax"].error.startswith("build failed")
    for r in (by_fault["crash"], by_fault["wrong"], by_fault["hang"], by_fault["syntax"]):
        assert not r.ok and r.latencies == () and r.median_s == float("inf")
    good = [r for r in results if "fault" not in r.config]
    assert len(good) == 2 and all(r.ok and len(r.latencies) == 2 for r in good)
    rec = by_fault["hang"].record(task, "t")           # failures become database records with their error
    assert rec.error and not rec.ok and rec.workload_key == task.key


def test_large_kernels_are_checked_against_the_default_build(task, monkeypatch):
    import tensorforge.tune.measure as measure
    monkeypatch.setattr(measure, "INTERPRETER_MAX_POINTS", 0)     # pretend the interpreter is too slow
    with FaultyMeasurer(repeats=1, min_repeat_s=0.0, timeout_s=30) as m:
        ok, wrong = m.measure(task, [DEFAULT, dict(DEFAULT, fault="wrong")])
    assert ok.ok and ok.error is None
    assert wrong.error.startswith("wrong output")
