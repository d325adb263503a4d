"""tensorforge.tune and compile(db=...): tuning stores records, a second run measures nothing, and
compile applies the best record of every kernel (different code, same numbers)."""
import numpy as np
import pytest
import torch

import tensorforge
from tensorforge.cli import main as cli_main
from tensorforge.codegen.target import Target
from tensorforge.tune.database import Record, TuningDatabase
from tensorforge.tune.space import DEFAULT, space_for
from tensorforge.tune.tasks import extract_tasks



@pytest.fixture(scope="module")
def tasks(graph):
    return extract_tasks(graph)


def _close_to_torch(cm, model, inputs):
    with torch.no_grad():
        want = model(*inputs).numpy()
    got = cm(*[x.numpy() for x in inputs])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_tune_then_compile_applies_and_a_second_tune_does_nothing(model, graph, tmp_path):
    m, inputs = model
    db = str(tmp_path / "tune.sqlite")
    report = tensorforge.tune(graph, trials=6, db=db, progress=False, batch_size=3, kinds=("loop",))
    assert report.trials == 6
    assert sum(t.records for t in report.tasks) == 6
    for t in report.tasks:
        assert t.kind == "loop" and (t.trials == 0 or np.isfinite(t.best_s))
    again = tensorforge.tune(graph, trials=6, db=db, progress=False, batch_size=3, kinds=("loop",))
    assert again.trials == 0
    assert [t.best_s for t in again.tasks] == [t.best_s for t in report.tasks]     # same records, same best
    cm = tensorforge.compile(graph, db=db)
    _close_to_torch(cm, m, inputs)


def _add_best(db_path, task, config):
    """A record for ``config`` that is faster than anything else in the db (so ``best`` picks it)."""
    with TuningDatabase(db_path) as db:
        db.add_workload(task.workload())
        db.add_records([Record(task.key, Target.host().key(), DEFAULT, (1e-3,)),
                        Record(task.key, Target.host().key(), config, (1e-9, 1e-9))])


@pytest.mark.parametrize("kind", ["gemm", "loop"])
def test_compile_with_db_applies_the_best_record(model, graph, tasks, tmp_path, kind):
    m, inputs = model
    target = Target.host()
    task = next(t for t in tasks if t.kind == kind)
    space = space_for(task, target)
    if kind == "gemm":      # a register tile the default would not pick
        vw = target.vector_width
        config = {"kind": "gemm", "params": {**space.seeds()[1]["params"], "mr": 4, "nr": 2 * vw, "mc": 32,
                                             "nc": 2 * vw, "kc": 32, "unroll": 2}}
    else:                   # the default schedule minus its last step
        steps = space.seeds()[1]["trace"]["steps"]
        config = {"kind": "loop", "trace": {"version": 1, "steps": steps[:-1]}}
    space.check(config)
    db = str(tmp_path / f"{kind}.sqlite")
    _add_best(db, task, config)
    tuned = tensorforge.compile(graph, db=db)
    untuned = tensorforge.compile(graph, db=None)
    assert tuned.native.build["tuned_kernels"] == 1
    assert untuned.native.build["tuned_kernels"] == 0
    assert tuned.source != untuned.source                  # the record changed the emitted code
    _close_to_torch(tuned, m, inputs)
    _close_to_torch(untuned, m, inputs)


def test_a_stale_record_falls_back_to_the_default(model, graph, tasks, tmp_path):
    m, inputs = model
    task = next(t for t in tasks if t.kind == "loop")
    db = str(tmp_path / "stale.sqlite")
    _add_best(db, task, {"kind": "loop", "trace": {"version": 1, "steps": [["split", ["no.such.loop"], [4]]]}})
    with pytest.warns(UserWarning, match="no longer applies"):
        cm = tensorforge.compile(graph, db=db)
    assert cm.native.build["tuned_kernels"] == 0
    _close_to_torch(cm, m, inputs)


def test_cli_tune_twice(tmp_path, capsys):
    db = str(tmp_path / "cli.sqlite")
    args = ["tune", "mlp_small", "--trials", "4", "--measure-batch", "2", "--kinds", "loop", "--db", db, "--quiet"]
    assert cli_main(args) == 0
    first = capsys.readouterr().out
    assert "4 trials in" in first and "speedup" in first
    assert cli_main(args) == 0
    assert "0 trials in" in capsys.readouterr().out
    assert cli_main(["tune", "no_such_model", "--db", db]) == 1
    assert cli_main(["tune", "mlp_small", "--kinds", "quantum", "--db", db]) == 1


def test_compile_uses_the_default_database_when_it_exists(model, graph, tasks, tmp_path, monkeypatch):
    m, inputs = model
    task = next(t for t in tasks if t.kind == "loop")
    steps = space_for(task, Target.host()).seeds()[1]["trace"]["steps"]
    path = tmp_path / "default.sqlite"
    monkeypatch.setenv("TENSORFORGE_TUNE_DB", str(path))
    assert tensorforge.compile(graph).native.build["tuned_kernels"] == 0      # no file: untuned
    _add_best(str(path), task, {"kind": "loop", "trace": {"version": 1, "steps": steps[:-1]}})
    cm = tensorforge.compile(graph)                                            # db="auto"
    assert cm.native.build["tuned_kernels"] == 1
    _close_to_torch(cm, m, inputs)
    assert tensorforge.compile(graph, db=None).native.build["tuned_kernels"] == 0
    path.write_bytes(b"not a database" * 64)
    with pytest.warns(UserWarning, match="not usable"):
        assert tensorforge.compile(graph).native.build["tuned_kernels"] == 0


def test_report_shows_unmeasured_tasks_as_dashes_not_nan():
    """A task that got no trials yet (budget spent elsewhere) reads '-', and the model estimate
    says how many tasks are missing instead of printing nan/inf."""
    import math

    from tensorforge.tune.api import TaskReport, TuneReport
    done = TaskReport("k0_gemm", "a", "gemm", 2, 2e9, 4, 4, 2e-3, 1e-3, {"kind": "default"})
    todo = TaskReport("k1_softmax", "b", "loop", 1, 1e6, 0, 0, math.inf, math.inf, None)
    text = str(TuneReport("t", "db.sqlite", [done, todo], trials=4, seconds=1.0))
    assert "nan" not in text and "inf" not in text
    row = next(line for line in text.splitlines() if line.startswith("k1_softmax"))
    assert row.split()[-5:] == ["-", "-", "0.0", "-", "unconfirmed"]     # last: the confirmation column
    assert "1 of 2 tasks not measured yet" in text
    full = str(TuneReport("t", "db.sqlite", [done], trials=4, seconds=1.0))
    assert "default 4.000 ms, tuned 2.000 ms (2.00x)" in full
