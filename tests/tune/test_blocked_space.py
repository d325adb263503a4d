"""A convolution in the blocked NCHW[16]c layout is a tuning task of its own (``BlockedSpace``, kind
"blocked"): its algorithm (direct, Winograd F(2x2) or F(4x4) for 3x3 stride-1 layers; depthwise),
register tile, input chunk and band are knobs; every candidate the space makes is valid and
measures to the right output, and a database record reaches ``tensorforge.compile``, whose report
names the tuned cut and whose outputs match the untuned build's.  The depthwise conv and the 1x1
after it stay apart here (``TENSORFORGE_NCHWC_DW_PW=0``), so each is a task of its own;
``tests/codegen/test_nchwc_mbconv.py`` tunes the fused chain."""
import random

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c import nchwc
from tensorforge.codegen.target import Target
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor
from tensorforge.passes.pipeline import default_pipeline_text
from tensorforge.tune.apply import Tuning
from tensorforge.tune.measure import Measurer, Result
from tensorforge.tune.space import DEFAULT, BlockedSpace, InvalidCandidate, space_for
from tensorforge.tune.tasks import extract_tasks

LAYOUT = default_pipeline_text(layout=True)
HOST = Target.host()
X_SHAPE = (1, 32, 14, 14)


def _model() -> ModuleOp:
    """x -> 3x3 conv 32->32 (+relu) -> depthwise 3x3 (+relu6) -> 1x1 conv 32->48."""
    rng = np.random.default_rng(0)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(X_SHAPE)], arg_names=["x"])
    g = f.builder().graph

    def const(*shape, fan_in):
        return g.constant((rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))
    y = g.relu(g.conv(f.args[0], const(32, 32, 3, 3, fan_in=288), const(32, fan_in=1), pads=(1,) * 4))
    y = g.clip(g.conv(y, const(32, 1, 3, 3, fan_in=9), const(32, fan_in=1), pads=(1,) * 4, groups=32), min=0.0, max=6.0)
    y = g.conv(y, const(48, 32, 1, 1, fan_in=32), const(48, fan_in=1))
    f.set_return([y])
    return m


def _x() -> np.ndarray:
    return np.random.default_rng(1).standard_normal(X_SHAPE).astype(np.float32)


@pytest.fixture(scope="module", autouse=True)
def _unfused():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TENSORFORGE_NCHWC_DW_PW", "0")
        yield


@pytest.fixture(scope="module")
def tasks(_unfused):
    found = [t for t in extract_tasks(_model(), passes=LAYOUT) if t.kind == "blocked"]
    assert len(found) == 3, [str(t) for t in found]
    return {t.problem["conv"]["algorithm"] if t.problem["conv"]["groups"] == 1 and t.problem["conv"]["kernel"] == [3, 3]
            else "depthwise" if t.problem["conv"]["groups"] > 1 else "pointwise": t for t in found}


def test_blocked_convs_are_tasks_with_their_algorithms(tasks):
    assert set(tasks) == {"winograd2", "depthwise", "pointwise"}      # 14x14: 49 F(2x2) tiles
    three = tasks["winograd2"].problem
    assert three["conv"]["algorithms"] == ["direct", "winograd2", "winograd4"]
    assert (three["M"], three["N"], three["K"], three["batch"]) == (32, 196, 288, 1)
    assert tasks["depthwise"].problem["conv"]["algorithms"] == ["depthwise"]
    assert tasks["depthwise"].problem["K"] == 9 and tasks["depthwise"].flops == 2.0 * 32 * 196 * 9
    assert tasks["pointwise"].problem["conv"]["algorithms"] == ["direct"]
    assert "k3x3" in tasks["winograd2"].shape_text()
    # timed with weights as cold as in the model: copies rotated through the model's weight bytes,
    # at least twice all cores' L2 (the weights here: 32x32x3x3 + 32x3x3 + 32x48 floats and biases)
    from tensorforge.tune import measure
    assert three["model_weight_bytes"] >= 4 * (32 * 32 * 9 + 32 * 9 + 48 * 32)
    assert measure.rotate_bytes(HOST, tasks["winograd2"]) == min(
        measure.MAX_ROTATE_BYTES, max(2 * HOST.l2 * HOST.cores, three["model_weight_bytes"]))
    assert "blocked" in measure.COLD_WEIGHT_KINDS
    # without the kind, no blocked task
    assert not [t for t in extract_tasks(_model(), passes=LAYOUT, kinds=("gemm", "loop")) if t.kind == "blocked"]


def test_every_candidate_of_the_space_is_valid(tasks):
    rng = random.Random(0)
    for task in tasks.values():
        space = space_for(task, HOST)
        assert isinstance(space, BlockedSpace)
        seeds = space.seeds()
        assert seeds[0] == DEFAULT
        configs = seeds + [space.sample(rng) for _ in range(60)] + [space.mutate(space.sample(rng), rng)
                                                                    for _ in range(60)]
        for c in configs[1:]:
            params = space.check(c)
            assert isinstance(params, nchwc.BlockedParams) and params.algorithm in task.problem["conv"]["algorithms"]
        assert len({space.check(c) for c in configs[1:]}) > (4 if task is tasks["depthwise"] else 20)
    # each other algorithm of the 3x3 layer is a seed, so the first batch measures it
    assert {s["params"]["algorithm"] for s in space_for(tasks["winograd2"], HOST).seeds()[1:]} >= {"direct", "winograd4"}


def test_the_space_offers_only_tiles_that_fit_the_registers(tasks):
    """AVX2's 16 registers hold 3 output blocks x 4 positions (12 accumulators, 3 weight vectors,
    the broadcast), not 4 x 3 (17: spills); AVX-512's 32 hold 4 x 7."""
    from tensorforge.codegen.c import nchwc
    task = tasks["winograd2"]           # 32 -> 32 channels: 4 output blocks of 8 lanes on AVX2
    for march, most in (("haswell", 3), ("skylake-avx512", 4)):
        target = Target(march=march, arch="x86_64", cores=2)
        space = BlockedSpace(task, target)
        ob = task.problem["conv"]["geometry"]["ob"]
        assert space._choices("direct", 0)["blocks"] == (0,) + tuple(range(1, min(most, ob) + 1))
        assert nchwc.untuned_blocks(target) == most


@pytest.mark.parametrize("which,params,why", [
    ("pointwise", {"algorithm": "winograd2"}, "does not apply"),
    ("pointwise", {"algorithm": "direct", "chunk": 3}, "does not divide"),
    # one more output block than a tile may take: 48 channels make 3 blocks of 16 lanes (6 of 8:
    # then past MAX_BLOCKS)
    ("pointwise", {"algorithm": "direct", "blocks": min(nchwc.MAX_BLOCKS, 48 // HOST.vector_width) + 1},
     "output blocks"),
    ("pointwise", {"algorithm": "direct", "blocks": 2, "rows": 15}, "registers"),
    ("pointwise", {"algorithm": "direct", "band": -1}, "count"),
    ("depthwise", {"algorithm": "depthwise", "blocks": 1}, "only rows"),
    ("depthwise", {"algorithm": "direct"}, "does not apply"),
    ("winograd2", {"algorithm": "direct", "band": 15}, "rows"),
])
def test_the_space_rejects_what_does_not_apply(tasks, which, params, why):
    space = space_for(tasks[which], HOST)
    with pytest.raises(InvalidCandidate, match=why):
        space.check({"kind": "blocked", "params": params})
    with pytest.raises(InvalidCandidate):
        space.check({"kind": "gemm", "params": {}})


def test_every_algorithm_and_tile_measured_is_right(tasks):
    rng = random.Random(1)
    with Measurer(HOST, repeats=1, min_repeat_s=0.0, timeout_s=120) as m:
        for task in tasks.values():
            space = space_for(task, HOST)
            configs = space.seeds() + [space.sample(rng) for _ in range(3)]
            for r in m.measure(task, configs):       # outputs checked against the interpreter by the runner
                assert r.error is None and r.ok, (task.shape_text(), r.config, r.error)


def _tuned(tmp_path, records: list) -> "tensorforge.CompiledModel":
    """The model compiled with a database holding ``records`` ((task, blocked params) pairs),
    each recorded as faster than the default."""
    from tensorforge.tune.database import TuningDatabase
    db_path = tmp_path / f"blocked{len(list(tmp_path.iterdir()))}.sqlite"
    db = TuningDatabase(db_path)
    for task, params in records:
        db.add_records([Result({"kind": "blocked", "params": params}, [1e-6] * 3).record(task, HOST.key()),
                        Result(DEFAULT, [2e-6] * 3).record(task, HOST.key())])
    db.close()
    return tensorforge.compile(_model(), passes=LAYOUT, db=str(db_path))


def _report(cm) -> str:
    return "\n".join(cm.native.layout.schedules.values())


def test_blocked_records_reach_compile(tmp_path, tasks):
    # 7 positions of one output block a tile: within the registers of AVX2 as of AVX-512
    tuned = _tuned(tmp_path, [(tasks["winograd2"], {"algorithm": "winograd4", "blocks": 1, "rows": 7}),
                              (tasks["depthwise"], {"algorithm": "depthwise", "rows": 6}),
                              (tasks["pointwise"], {"algorithm": "direct", "blocks": 1, "rows": 5, "chunk": 1})])
    untuned = tensorforge.compile(_model(), passes=LAYOUT, db=None)
    report = _report(tuned)
    assert "Winograd F(4x4, 3x3)" in report and "6-position tiles (tuned)" in report
    assert "tiles of 5 positions x 1 output blocks, input blocks in chunks of 1" in report
    assert "Winograd F(2x2, 3x3)" in _report(untuned) and "(tuned)" not in _report(untuned)
    x = _x()
    want = tensorforge.compile(_model(), target="interpreter", passes=False)(x)
    got = tuned(x)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * float(np.abs(want).max()))
    np.testing.assert_allclose(got, untuned(x), rtol=0, atol=2e-5 * float(np.abs(want).max()))


def test_direct_tiles_keep_the_sums_order(tmp_path, tasks):
    """Tile, chunk and band change which registers hold a sum and when it waits in y, not the order
    in which a position's products are added: every direct cut of a layer gives the same bits (the
    last one a tile of 2 output blocks and as many positions as the registers hold: 14 on AVX-512,
    6 on AVX2)."""
    x = _x()
    outs = [_tuned(tmp_path, [(tasks["winograd2"], params)])(x)
            for params in ({"algorithm": "direct"}, {"algorithm": "direct", "blocks": 1, "rows": 3, "chunk": 1, "band": 2},
                           {"algorithm": "direct", "blocks": 2, "rows": nchwc.tile_rows(2, HOST), "chunk": 2})]
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_a_blocked_record_that_no_longer_applies_warns(tasks):
    task = tasks["pointwise"]
    kernel = task.kernel
    tuning = Tuning.fixed({task.key: {"kind": "blocked", "params": {"algorithm": "winograd4"}}}, HOST)
    with pytest.warns(UserWarning, match="no longer apply"):
        assert tuning.params_for(kernel) is None
    ok = Tuning.fixed({task.key: {"kind": "blocked", "params": {"algorithm": "direct", "blocks": 1}}}, HOST)
    assert ok.params_for(kernel) == nchwc.BlockedParams("direct", blocks=1)


def test_the_model_check_times_tuned_kernels_in_the_model(tmp_path, tasks):
    """``in_model.check_in_model`` builds the model untuned and tuned with kernel timers, and stores
    for every tuned workload a confirmation on clock "model" that ``best`` then decides by."""
    from tensorforge.tune.database import TuningDatabase
    from tensorforge.tune.in_model import check_in_model
    from tensorforge.tune.tasks import lowered_module
    db = TuningDatabase(tmp_path / "check.sqlite")
    chosen = [(tasks["winograd2"], {"algorithm": "direct", "blocks": 1}),
              (tasks["pointwise"], {"algorithm": "direct", "rows": 3})]
    for task, params in chosen:
        db.add_workload(task.workload())
        db.add_records([Result({"kind": "blocked", "params": params}, [1e-6] * 3).record(task, HOST.key()),
                        Result(DEFAULT, [2e-6] * 3).record(task, HOST.key())])
    checks = check_in_model(lowered_module(_model(), passes=LAYOUT), db, HOST, list(tasks.values()), margin=0.04,
                            rounds=3, runs=2)
    assert sorted(c.key for c in checks) == sorted(t.key for t, _ in chosen)
    for c in checks:
        conf = db.confirmation(c.key, HOST.key())
        assert conf.clock == "model" and conf.configs[0] == DEFAULT and len(conf.latencies) == 2
        assert len(conf.latencies[0]) == 3 and all(x > 0 for row in conf.latencies for x in row)
        assert c.speedup == pytest.approx(conf.speedups[1]) and c.kept == bool(conf.winners(0.04))
        assert (db.best(c.key, HOST.key()) is not None) == c.kept
        assert c.name == "conv_nchwc"
    db.close()


def test_the_report_says_what_the_model_check_did():
    from tensorforge.tune.api import TuneReport
    from tensorforge.tune.in_model import ModelCheck
    report = TuneReport("t", "db", model_checks=[ModelCheck("a", "conv", 1.12, True), ModelCheck("b", "conv", 0.9, False)])
    assert "checked in the model: 2 tuned workloads, 1 kept (in-model speedups 1.12x), 1 back to the default" in str(report)
    assert report.to_dict()["model_checks"][1] == {"key": "b", "name": "conv", "speedup": 0.9, "kept": False}
