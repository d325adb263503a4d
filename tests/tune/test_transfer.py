"""Configs that won on similar workloads (``tune/transfer.py``): the nearest workloads of the same
kind give their fastest configs, and a warm search measures them right after the default, before
the space's seeds; a cold one never sees them."""
import random

import pytest

import tensorforge
from tensorforge.codegen.target import Target
from tensorforge.tune.database import Record, TuningDatabase, Workload
from tensorforge.tune.search import TaskSearch
from tensorforge.tune.space import DEFAULT, canonical, space_for
from tensorforge.tune.transfer import distance, transferred_configs

from tests.tune.test_warm_cost_model import FakeMeasurer
from tests.tune.tune_util import ListSpace, ScoreModel, stack_model, task_of


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))


def gemm_desc(m, n, k, conv=None):
    problem = {"M": m, "N": n, "K": k, "batch": 1}
    if conv:
        problem["conv"] = conv
    return {"kind": "conv" if conv else "gemm", "kernel": "gemm", "problem": problem}


def test_distance_is_log_shape_and_only_within_a_kind():
    me = gemm_desc(64, 256, 128)
    assert distance(me, gemm_desc(64, 256, 128)) == 0
    assert distance(me, gemm_desc(128, 256, 64)) == 2.0          # M twice, K half
    assert distance(me, {"kind": "loop", "kernel": "gemm"}) is None
    conv = {"kernel": [3, 3], "strides": [1, 1]}
    a, b = gemm_desc(8, 64, 72, conv), gemm_desc(8, 64, 72, {"kernel": [3, 3], "strides": [2, 2]})
    assert distance(a, a) == 0 and distance(a, b) is None         # another stride: another kernel wins
    loop = {"kind": "loop", "kernel": "layer_norm_3", "bytes": 4096.0, "flops": 1000.0}
    assert distance(loop, {"kind": "loop", "kernel": "layer_norm", "bytes": 8192.0, "flops": 1000.0}) == 1.0
    assert distance(loop, {"kind": "loop", "kernel": "softmax", "bytes": 4096.0, "flops": 1000.0}) is None


def test_the_nearest_workloads_give_their_fastest_configs(tmp_path):
    task = task_of(*stack_model(rows=16, width=32), "gemm")
    me = task.description()
    p = me["problem"]
    tk = "target-a"
    with TuningDatabase(tmp_path / "t.sqlite") as db:
        near, far = gemm_desc(p["M"], p["N"], p["K"] * 2), gemm_desc(p["M"] * 64, p["N"], p["K"])
        db.add_workload(Workload("near", near))
        db.add_workload(Workload("far", far))
        db.add_workload(Workload("loop", {"kind": "loop", "kernel": "gemm"}))

        def rec(w, v, s, target=tk, error=None):
            return Record(w, target, {"kind": "gemm", "params": {"v": v}}, () if error else (s,), error=error)
        db.add_records([rec("near", 1, 3e-3), rec("near", 2, 1e-3), rec("near", 3, 2e-3), rec("near", 4, 0, error="x"),
                        Record("near", tk, DEFAULT, (0.5e-3,)),
                        rec("far", 5, 1e-4), rec("far", 6, 1e-4, target="other-target"),
                        rec("loop", 7, 1e-5)])
        got = transferred_configs(db, task, tk, per_workload=2)
        assert [c["params"]["v"] for c in got] == [2, 3, 5]       # nearest first, fastest first, no default
        assert [c["params"]["v"] for c in transferred_configs(db, task, tk, neighbours=1)] == [2, 3]
        assert transferred_configs(db, task, "nowhere") == []


def test_a_config_left_to_the_compiler_is_spelled_out_as_its_workload_got_it():
    from tensorforge.tune.transfer import absolute
    conv = {"problem": {"conv": {"algorithm": "direct", "algorithms": ["im2col", "direct", "winograd"]}}}
    left = {"kind": "gemm", "params": {"conv_algorithm": "", "mr": 12}}
    assert absolute(left, conv) == {"kind": "gemm", "params": {"conv_algorithm": "direct", "mr": 12}}
    assert left["params"]["conv_algorithm"] == ""                          # not changed in place
    chosen = {"kind": "gemm", "params": {"conv_algorithm": "winograd", "mr": 12}}
    assert absolute(chosen, conv) is chosen
    narrow = {"problem": {"conv": {"algorithm": "narrow", "algorithms": ["im2col"]}}}     # not a GEMM algorithm
    assert absolute(left, narrow) is left and absolute(left, {"problem": {}}) is left


def test_a_warm_search_measures_transferred_configs_after_the_default():
    seeds = [DEFAULT, {"kind": "s", "v": 1}, {"kind": "s", "v": 2}]
    transfer = [{"kind": "t", "v": 3}, {"kind": "t", "v": 99}, {"kind": "t", "v": 7}, {"kind": "s", "v": 2}]
    search = TaskSearch(task=None, space=ListSpace(seeds, illegal=(99,)), model=ScoreModel(warm=False),
                        rng=random.Random(0), transfer=transfer)
    batch = search.next_batch(5)
    # the default, then the transferred configs in their order (nearest workload first; 99 is
    # illegal here, and the seed that is also a transferred config is measured once), then the
    # other seed
    assert [(c["kind"], c.get("v")) for c in batch] == [("default", None), ("t", 3), ("t", 7), ("s", 2), ("s", 1)]
    assert len({canonical(c) for c in batch}) == 5
    # a model that learned from other workloads also orders the remaining seeds (else: the space's order)
    seeds = [DEFAULT, {"kind": "s", "v": 1}, {"kind": "s", "v": 5}, {"kind": "s", "v": 2}]
    for warm, order in ((True, [None, 3, 5, 2, 1]), (False, [None, 3, 1, 5, 2])):
        s = TaskSearch(task=None, space=ListSpace(seeds), model=ScoreModel(warm), rng=random.Random(0),
                       transfer=transfer[:1])
        assert [c.get("v") for c in s.next_batch(5)] == order


def test_tune_hands_the_database_neighbours_to_a_new_task(tmp_path):
    """End to end: a model tuned before seeds the first batch of another model's similar task."""
    db = str(tmp_path / "t.sqlite")
    m, x = stack_model(rows=16, width=32)
    tensorforge.tune(tensorforge.import_model(m, x), trials=24, db=db, progress=False, batch_size=4,
                     measurer=FakeMeasurer(), kinds=("gemm",))
    key = Target.host().key()
    with TuningDatabase(db, readonly=True) as d:
        won = {canonical(r.config) for w in d.workloads() for r in sorted(
            (r for r in d.records(w.key, key) if r.ok and r.config.get("kind") != "default"),
            key=lambda r: r.median_s)[:2]}
    first = []

    class Spy(FakeMeasurer):
        def measure(self, task, configs):
            if not first:
                first.extend(configs)
            return super().measure(task, configs)

    m2, x2 = stack_model(rows=24, width=40)
    tensorforge.tune(tensorforge.import_model(m2, x2), trials=6, db=db, progress=False, batch_size=6,
                     measurer=Spy(), kinds=("gemm",))
    assert first[0] == DEFAULT
    assert {canonical(c) for c in first[1:]} & won             # the neighbours' winners come right after
    first.clear()
    m3, x3 = stack_model(rows=20, width=40)                  # cold: the space's own seeds, in its order
    tensorforge.tune(tensorforge.import_model(m3, x3), trials=6, db=db, progress=False, batch_size=6,
                     measurer=Spy(), kinds=("gemm",), warm=False)
    seeds = space_for(task_of(m3, x3, "gemm"), Target.host()).seeds()[:6]
    # the batch opens with the seeds (16 registers' space, AVX2's, has fewer than 6: samples follow)
    assert len(first) == 6 and [canonical(c) for c in first[:len(seeds)]] == [canonical(c) for c in seeds]
