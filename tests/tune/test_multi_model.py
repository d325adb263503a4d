"""Several models in one tune: the union of their tasks, a shared kernel tuned once, the scheduler's
weight a task's share of all the models' latency, and the task table that says who uses what."""
import math

import pytest

import tensorforge
from tensorforge.cli import main as cli_main
from tensorforge.tune.database import TuningDatabase
from tensorforge.tune.measure import Result
from tensorforge.tune.multi import ModelShares, union_tasks
from tensorforge.tune.space import canonical
from tensorforge.tune.tasks import extract_tasks

from tests.tune.tune_util import conv_model, stack_model


class FakeMeasurer:
    """Times nothing: a config's 'latency' is a fixed function of its text (as test_search's)."""

    def __init__(self):
        self.measured = []

    def measure(self, task, configs):
        self.measured += [(task.key, canonical(c)) for c in configs]
        return [Result(c, (1e-3 * (1 + (hash(canonical(c)) % 97) / 97),)) for c in configs]

    def close(self):
        pass


@pytest.fixture(scope="module")
def models():
    deep, x = stack_model(rows=16, width=32, depth=3)
    shallow, _ = stack_model(rows=16, width=32, depth=1)       # same layer shapes: shares both kernels
    conv, cx = conv_model()
    return {"deep": (deep, x), "shallow": (shallow, x), "conv": (conv, cx)}


def test_union_counts_each_shared_kernel_once(models):
    per_model = {name: extract_tasks(m, x) for name, (m, x) in models.items()}
    tasks, shares = union_tasks(per_model)
    keys = [t.key for t in tasks]
    assert len(keys) == len(set(keys)) == len({t.key for ts in per_model.values() for t in ts})
    gemm = next(t for t in tasks if t.kind == "gemm")
    assert shares.users(gemm.key) == ["deep", "shallow"] and gemm.weight == 3 + 1
    conv = next(t for t in tasks if t.kind == "conv")
    assert shares.users(conv.key) == ["conv"]


def test_shares_sum_to_one_per_model_and_weigh_small_models_alike():
    """Every model's tasks share 1.0 of its latency, so the shares of all tasks sum to the number
    of models; a kernel that is all of a tiny model counts as much as all of a big one."""
    class T:
        def __init__(self, key, flops):
            self.key, self.flops, self.bytes = key, flops, 0.0
    tasks = [T("a", 1e9), T("b", 1e6), T("c", 1e6)]
    shares = ModelShares(["big", "tiny"], {"a": {"big": 2}, "b": {"big": 1, "tiny": 1}, "c": {"tiny": 1}})
    lat = [2e-2, 1e-4, 1e-4]
    s = shares.shares(tasks, lat)
    assert math.isclose(sum(s), 2.0)
    assert math.isclose(s[2], 0.5) and s[1] > s[2]          # b is half of tiny plus a bit of big
    w = shares.weights(tasks, lat)                          # weight x latency = share
    assert all(math.isclose(wi * li, si) for wi, li, si in zip(w, lat, s))


def test_tune_of_several_models_measures_a_shared_kernel_once(models, tmp_path):
    db = str(tmp_path / "multi.sqlite")
    fake = FakeMeasurer()
    graphs = {name: tensorforge.import_model(m, x) for name, (m, x) in models.items()}
    report = tensorforge.tune(graphs, trials=18, db=db, progress=False, batch_size=3, measurer=fake)
    assert report.trials == 18 and len(fake.measured) == 18
    assert len(set(fake.measured)) == 18                   # nothing measured twice, shared kernels included
    assert report.models == ["deep", "shallow", "conv"]
    by_kind = {t.kind: t for t in report.tasks}
    assert by_kind["gemm"].models == ("deep", "shallow") and by_kind["conv"].models == ("conv",)
    assert math.isclose(sum(t.share for t in report.tasks), 3.0, rel_tol=1e-6)
    text = str(report)
    assert "deep, shallow" in text and "weight" in text and "shared (tuned once)" in text
    with TuningDatabase(db, readonly=True) as d:
        assert len(d.workloads()) == len(report.tasks) and d.count() == 18
    again = tensorforge.tune(graphs, trials=18, db=db, progress=False, batch_size=3, measurer=FakeMeasurer())
    assert again.trials == 0


def test_cli_takes_several_models_and_prints_the_task_table(tmp_path, capsys):
    db = str(tmp_path / "cli.sqlite")
    rc = cli_main(["tune", "resnet18_small", "resnet50_small", "--trials", "0", "--db", db, "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "resnet18_small, resnet50_small" in out and "shared (tuned once)" in out


def test_the_task_table_tells_apart_tasks_of_one_name():
    """ResNet-18 has twelve conv_relu/conv_add_relu kernels: each row carries its shape."""
    from tensorforge.tune.api import TaskReport, TuneReport
    from tensorforge.tune.tasks import extract_tasks
    from tensorforge.commands.loading import load_model
    tasks = extract_tasks(load_model("resnet18_small", None, {}).import_module(), None)
    assert len({t.name for t in tasks}) < len(tasks)
    rows = [TaskReport(t.name, t.key, t.kind, t.weight, t.flops, 0, 0, math.inf, math.inf, None,
                       models=("a", "b"), shape=t.shape_text()) for t in tasks]
    for report in (TuneReport("t", "db", rows), TuneReport("t", "db", rows, models=["a", "b"])):
        lines = str(report).splitlines()[1:1 + len(tasks)]
        firsts = [line.split("  ")[0] for line in lines]
        assert len(set(firsts)) == len(tasks), firsts
    long = TaskReport("x" * 60, "k", "gemm", 1, 0.0, 0, 0, math.inf, math.inf, None, shape="32x64x32 b2")
    assert long.label(30) == "x" * 17 + "~ 32x64x32 b2" and len(long.label(30)) == 30
