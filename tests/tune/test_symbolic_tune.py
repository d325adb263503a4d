"""Tuning a model with symbolic dims (issue #13): tasks key on the symbolic workload, candidates are
measured at the symbols' hints (and checked at another size of the range), and a record applies
to the symbolic kernel at every size.

The model: ``softmax(gelu(x @ W + bias))`` over ``x: f32[b, s, 64]``, ``b`` in 1..64 (hint 8),
``s`` in 1..128 (hint 16); it lowers to a GEMM task and two loop tasks, all symbolic.  Kept small:
every candidate is a gcc run.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import TensorforgeError
from tensorforge.codegen.target import Target
from tensorforge.ir import Module, tensor
from tensorforge.ir.symbolic import SymbolRange, SymbolTable, set_symbol_table
from tensorforge.tune.api import ConfirmOptions
from tensorforge.tune.database import Record, TuningDatabase
from tensorforge.tune.measure import Measurer, other_sizes
from tensorforge.tune.space import DEFAULT, _loop_config, space_for
from tensorforge.tune.tasks import extract_tasks, lowered_function, workload_key

B, S = SymbolRange("b", 1, 64, hint=8), SymbolRange("s", 1, 128, hint=16)
SIZES = [(1, 1), (3, 7), (8, 16), (17, 100), (64, 128)]
WIDTH = 64


def build(symbols=(B, S), shape=("b", "s", WIDTH)):
    """(module, W, bias); ``symbols=None`` leaves the function without a table (static shapes)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) / 8
    bias = rng.standard_normal(WIDTH, dtype=np.float32)
    m = Module()
    f = m.add_function("main", [tensor(shape)])
    if symbols:
        set_symbol_table(f, SymbolTable(list(symbols)))
    g = f.builder().graph
    h = g.gelu(g.add(g.matmul(f.args[0], g.constant(w)), g.constant(bias)))
    f.set_return([g.softmax(h, axis=-1)])
    return m, w, bias


def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    from scipy.special import erf
    h = x.astype(np.float64) @ w + bias
    h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
    e = np.exp(h - h.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def check_sizes(cm, w, bias) -> None:
    for b, s in SIZES:
        x = np.random.default_rng(b * 1000 + s).standard_normal((b, s, WIDTH)).astype(np.float32)
        np.testing.assert_allclose(cm(x), reference(x, w, bias), rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def graph():
    return build()


@pytest.fixture(scope="module")
def tasks(graph):
    return extract_tasks(graph[0])


@pytest.fixture(scope="module")
def measurer():
    with Measurer(threads=1, repeats=1, min_repeat_s=0.001, workers=2, interleave=False) as m:
        yield m


def _task(tasks, kind: str, name: str | None = None):
    return next(t for t in tasks if t.kind == kind and (name is None or t.name == name))


def _add_best(db_path, task, config) -> None:
    """A record for ``config`` faster than anything else in the db (so ``best`` picks it)."""
    with TuningDatabase(db_path) as db:
        db.add_workload(task.workload())
        db.add_records([Record(task.key, Target.host().key(), DEFAULT, (1e-3,)),
                        Record(task.key, Target.host().key(), config, (1e-9, 1e-9))])


def test_tasks_key_on_the_symbolic_workload(graph, tasks):
    assert {t.kind for t in tasks} == {"gemm", "loop"} and len(tasks) == 3
    assert all(t.is_symbolic and t.hints() == {"b": 8, "s": 16} for t in tasks)
    gemm = _task(tasks, "gemm")
    # estimated at the hints: M = b*s = 128 rows
    assert gemm.problem["M"] == 128 and gemm.problem["N"] == WIDTH and gemm.problem["K"] == WIDTH
    assert gemm.problem["dims"]["M"] == "b*s"
    assert gemm.flops == 2.0 * 128 * WIDTH * WIDTH
    assert all(math.isfinite(t.flops) and t.flops > 0 and t.bytes >= 4 * 128 * WIDTH for t in tasks)
    desc = gemm.workload().description
    assert desc["inputs"][0] == "b*sx64xf32" and desc["symbols"]["b"] == {"range": "1..64", "hint": 8}
    # the keys are the model's kernels' keys ...
    func = lowered_function(graph[0])
    assert {t.key for t in tasks} == {workload_key(op) for op in func.body if op.name == "structured.kernel"}
    # ... and do not depend on the hints or ranges: one record serves the whole range
    other = extract_tasks(build((SymbolRange("b", 1, 32, hint=30), SymbolRange("s", 2, 512, divisor=2, hint=4)))[0])
    assert {t.key for t in other} == {t.key for t in tasks}
    assert [t.hints() for t in other][0] == {"b": 30, "s": 4}
    # a static build at the hint sizes is a different workload (static code, static key)
    static = extract_tasks(build(None, (8, 16, WIDTH))[0])
    assert not {t.key for t in static} & {t.key for t in tasks}
    assert not any(t.is_symbolic for t in static) and "symbols" not in static[0].description()


def test_candidates_are_measured_at_the_hints_and_checked_at_another_size(tasks, measurer):
    task = _task(tasks, "loop", "reshape_gelu_softmax")
    assert other_sizes(task) == [{"b": 7, "s": 15}]
    bench = measurer.bench(task)
    assert bench.dims == [8, 16]
    # its input is the GEMM's f32[b*s, 64], its output f32[b, s, 64]
    assert np.load(bench.inputs[0]).shape == (128, WIDTH) and bench.outputs[0]["shape"] == [8, 16, WIDTH]
    assert [c["dims"] for c in bench.checks] == [[7, 15]]
    assert np.load(bench.checks[0]["inputs"][0]).shape == (105, WIDTH)
    space = space_for(task, Target.host())
    split = _loop_config(space.default_trace() + [["split", ["4.1"], [4]]])    # s by 4: a guarded tail at 15
    results = measurer.measure(task, [DEFAULT, split])
    assert all(r.ok and r.error is None for r in results), [r.error for r in results]
    # the same task at other sizes (same key): the runner's reference check passes there too
    for b, s in ((1, 1), (3, 100)):
        at = task.at(b=b, s=s)
        assert at.key == task.key and measurer.bench(at).dims == [b, s]
        assert all(r.ok for r in measurer.measure(at, [split])), (b, s)


def test_a_wrong_output_at_the_other_size_costs_the_candidate(tasks):
    task = _task(tasks, "loop", "reshape_gelu_softmax")
    with Measurer(threads=1, repeats=1, min_repeat_s=0.001, workers=1, interleave=False) as m:
        check = m.bench(task).checks[0]
        np.save(check["reference"][0], np.load(check["reference"][0]) + 1.0)
        (res,) = m.measure(task, [DEFAULT])
    assert not res.ok and "wrong output at dims [7, 15]" in res.error


def test_tune_stores_symbolic_records_and_compile_applies_them(graph, tasks, measurer, tmp_path):
    m, w, bias = graph
    db = str(tmp_path / "sym.sqlite")
    report = tensorforge.tune(m, trials=9, db=db, progress=False, batch_size=3, measurer=measurer,
                              confirm=ConfirmOptions(top=0))
    assert report.trials == 9 and {t.key for t in report.tasks} == {t.key for t in tasks}
    target_key = Target.host().key()
    with TuningDatabase(db, readonly=True) as d:
        workloads = {wl.key: wl.description for wl in d.workloads()}
        assert set(workloads) == {t.key for t in tasks}
        for key, desc in workloads.items():
            assert "b" in desc["inputs"][0] and desc["symbols"]["s"]["hint"] == 16
            records = d.records(key, target_key)
            assert len(records) == 3 and any(r.ok and r.config["kind"] == "default" for r in records)
            assert sum(r.ok for r in records) >= 2, [r.error for r in records]
    # the same model with other hints finds its records under the same keys: nothing to measure
    again = tensorforge.tune(build((SymbolRange("b", 1, 64, hint=3), S))[0], trials=9, db=db, progress=False,
                             measurer=measurer, confirm=ConfirmOptions(top=0))
    assert again.trials == 0 and all(t.records == 3 for t in again.tasks)
    cm = tensorforge.compile(m, db=db, threads=1)
    assert cm.native.is_dynamic
    check_sizes(cm, w, bias)


def test_records_apply_to_the_symbolic_kernels_at_every_size(graph, tasks, tmp_path):
    m, w, bias = graph
    target = Target.host()
    vw = target.vector_width
    db = str(tmp_path / "forced.sqlite")
    gemm = _task(tasks, "gemm")
    params = {**space_for(gemm, target).seeds()[1]["params"], "mr": 4, "nr": 2 * vw, "mc": 32, "nc": 2 * vw,
              "kc": 32, "unroll": 2, "threads": 1}
    _add_best(db, gemm, {"kind": "gemm", "params": params})
    softmax = _task(tasks, "loop", "reshape_gelu_softmax")
    _add_best(db, softmax, _loop_config(space_for(softmax, target).default_trace() + [["split", ["4.1"], [4]]]))
    copy = _task(tasks, "loop", "reshape")
    _add_best(db, copy, _loop_config([["vectorize", ["0.1"], []], ["unroll", ["0.0"], [4]]]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # every record applies: no "no longer applies" warning
        cm = tensorforge.compile(m, db=db, threads=1)
    assert cm.native.build["tuned_kernels"] == 3
    schedules = "\n".join(cm.native.layout.schedules.values())
    assert "split('4.1', 4)" in schedules and "unroll('0.0', 4)" in schedules
    check_sizes(cm, w, bias)
    # a model with other hints and ranges gets the same records
    other, _, _ = build((SymbolRange("b", 1, 16, hint=2), SymbolRange("s", 1, 64, hint=64)))
    cm2 = tensorforge.compile(other, db=db, threads=1)
    assert cm2.native.build["tuned_kernels"] == 3


def test_a_trace_that_does_not_replay_falls_back_to_the_default(graph, tasks, tmp_path):
    m, w, bias = graph
    db = str(tmp_path / "stale.sqlite")
    softmax = _task(tasks, "loop", "reshape_gelu_softmax")
    _add_best(db, softmax, _loop_config([["split", ["9.9"], [4]]]))
    with pytest.warns(UserWarning, match="no longer applies"):
        cm = tensorforge.compile(m, db=db, threads=1)
    assert cm.native.build["tuned_kernels"] == 0
    check_sizes(cm, w, bias)


def test_torch_dynamic_shapes_give_the_same_tasks(tasks):
    torch = pytest.importorskip("torch")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            return torch.softmax(torch.nn.functional.gelu(self.linear(x)), -1)

    torch.manual_seed(0)
    b, s = torch.export.Dim("b", min=1, max=64), torch.export.Dim("s", min=1, max=128)
    found = extract_tasks(Model().eval(), (torch.randn(8, 16, WIDTH),), dynamic_shapes=({0: b, 1: s},))
    assert all(t.is_symbolic and t.hints() == {"b": 8, "s": 16} for t in found)
    # the same kernels as the hand-built graph (weights are not part of a key): the same records
    assert {t.key for t in found} == {t.key for t in tasks}


def test_symbolic_kernels_need_the_symbol_table():
    m, _, _ = build()
    m.main.attributes.pop("tf.symbols")
    with pytest.raises(TensorforgeError, match="declares no ranges"):
        extract_tasks(m)
