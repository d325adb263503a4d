"""The warm cost model: records carry their feature rows, so a later tune of another model trains on
them; the trained model is cached per target and database, and retrained when the records grew."""
import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.target import Target
from tensorforge.tune.database import Record, TuningDatabase
from tensorforge.tune.features import FEATURE_LAYOUT, FEATURE_NAMES
from tensorforge.tune.measure import Result
from tensorforge.tune.space import canonical
from tensorforge.tune.warm import RETRAIN_GROWTH, cache_dir, training_set, warm_cost_model

from tests.tune.tune_util import stack_model


class FakeMeasurer:
    def measure(self, task, configs):
        return [Result(c, (1e-3 * (1 + (hash(canonical(c)) % 97) / 97),)) for c in configs]

    def close(self):
        pass


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))


def _tuned_db(tmp_path, trials=16):
    db = str(tmp_path / "other.sqlite")
    m, x = stack_model(rows=16, width=32)
    tensorforge.tune(tensorforge.import_model(m, x), trials=trials, db=db, progress=False, batch_size=4,
                     measurer=FakeMeasurer())
    return db


def test_records_carry_feature_rows_for_other_models(tmp_path):
    db = _tuned_db(tmp_path)
    key = Target.host().key()
    with TuningDatabase(db, readonly=True) as d:
        rows = d.featured_records(key, FEATURE_LAYOUT)
        ok = sum(1 for w in d.workloads() for r in d.records(w.key, key) if r.ok)
        assert len(rows) == ok == 16
        assert all(len(v) == len(FEATURE_NAMES) for _, _, v in rows)
        assert d.featured_records(key, "another-layout") == []
        X, secs, groups = training_set(d, key)      # no featurize: stored rows only (no kernels needed)
        assert X.shape == (16, len(FEATURE_NAMES)) and len(set(groups)) == 2


def test_warm_model_is_cached_and_retrained_when_records_grow(tmp_path):
    db = _tuned_db(tmp_path)
    key = Target.host().key()
    with TuningDatabase(db) as d:
        first = warm_cost_model(d, key)
        assert first.transfer_rows == 16 and not getattr(first, "cached", False)
        assert len(list(cache_dir().glob("warm-*.npz"))) == 1
        again = warm_cost_model(d, key)
        assert getattr(again, "cached", False) and again.transfer_rows == first.transfer_rows
        assert again.transfer_weights == first.transfer_weights
        X = np.asarray([v for _, _, v in d.featured_records(key, FEATURE_LAYOUT)])
        np.testing.assert_allclose(again.predict(X), first.predict(X))
        # A few more records (under RETRAIN_GROWTH): still the cached model.
        w = d.workloads()[0]
        d.add_records([Record(w.key, key, {"kind": "loop", "trace": {"n": 1}}, (1.0,))])
        assert getattr(warm_cost_model(d, key), "cached", False)
        grow = int(first.transfer_rows * RETRAIN_GROWTH) + 1
        d.add_records([Record(w.key, key, {"kind": "loop", "trace": {"n": i + 2}}, (1.0,)) for i in range(grow)])
        assert not getattr(warm_cost_model(d, key), "cached", False)     # grew by 25%: retrained
        assert getattr(warm_cost_model(d, key), "cached", False)         # and cached again


def test_a_new_task_starts_with_the_warm_model(tmp_path):
    """A tune of a model the database never saw ranks its first batch with a trained model."""
    db = _tuned_db(tmp_path)
    m, x = stack_model(rows=8, width=48)          # other shapes: other workloads
    seen = []

    class Spy(FakeMeasurer):
        def measure(self, task, configs):
            seen.append(task.key)
            return super().measure(task, configs)

    from tensorforge.tune import api
    models = []
    real = api._cost_model

    def spy(*args, **kwargs):
        model = real(*args, **kwargs)
        models.append(model)
        return model
    api._cost_model = spy
    try:
        tensorforge.tune(tensorforge.import_model(m, x), trials=4, db=db, progress=False, batch_size=4,
                         measurer=Spy())
    finally:
        api._cost_model = real
    assert models and models[0].transfer_rows >= 16
    with TuningDatabase(db, readonly=True) as d:
        assert not any(k in {w.key for w in d.workloads()[:2]} for k in seen)


def _family_rows(groups=5, per=8, gemm=True, conv=False, seed=0):
    """Rows of one family whose speed falls with "unroll" in every workload (other sizes per workload);
    the roofline estimate is the same for all, so only the transfer trees can tell them apart."""
    from tensorforge.tune.features import INDEX
    rng = np.random.default_rng(seed)
    X, secs, names = [], [], []
    for g in range(groups):
        scale = 10.0 ** rng.uniform(-5, -2)
        for u in range(per)[::-1]:            # the slowest first: a tie in the ranking picks it
            row = np.zeros(len(FEATURE_NAMES))
            row[INDEX["is_gemm"]], row[INDEX["gemm_conv"]] = float(gemm), float(conv)
            row[INDEX["flops"]] = 10 + g
            row[INDEX["est_seconds"]] = -10.0
            row[INDEX["unroll"]] = u
            X.append(row)
            secs.append(scale * (1 + u))
            names.append(f"{'conv' if conv else 'gemm' if gemm else 'loop'}{g}")
    return np.asarray(X), np.asarray(secs), np.asarray(names)


def test_transfer_is_per_family_and_cross_validated(tmp_path):
    from tensorforge.tune.cost_model import CostModel
    X, s, g = _family_rows()
    model = CostModel()
    model.fit_transfer(X, s, g)
    assert model.transfer_rows == len(s) and model.rows == 0 and not model.trained
    assert model.transfer_weights["gemm"] > 0 and model.warm
    new = _family_rows(groups=1, seed=7)[0]
    assert np.argmax(model.predict(new)) == len(new) - 1      # unroll 0: the fastest, on a new workload
    # another family (a loop nest) keeps the roofline: the gemm trees do not apply to it
    loop = new.copy()
    loop[:, 0] = 0.0
    np.testing.assert_allclose(model.predict(loop), CostModel().predict(loop))
    # the task's own samples train trees that boost from the transfer prior
    own_s = 1e-3 * (1 + np.arange(len(new)))                   # on this task, unroll 0 is the SLOWEST
    model.update(new, own_s, ["task"] * len(new))
    from tensorforge.tune.cost_model import spearman
    assert model.trained and spearman(model.predict(new), -own_s) > 0.8
    model.save(tmp_path / "m.npz")
    back = CostModel.load(tmp_path / "m.npz")
    assert back.transfer_weights == model.transfer_weights
    np.testing.assert_allclose(back.predict(new), model.predict(new))


def test_a_family_with_too_few_workloads_keeps_the_roofline():
    from tensorforge.tune.cost_model import TRANSFER_MIN_GROUPS, CostModel
    X, s, g = _family_rows(groups=TRANSFER_MIN_GROUPS - 1)
    model = CostModel()
    model.fit_transfer(X, s, g)
    assert not model.warm and model.transfer_weights == {}


def test_a_warm_model_orders_the_seeds_default_first():
    import random
    from tensorforge.tune.search import TaskSearch
    from tensorforge.tune.space import DEFAULT
    from tests.tune.tune_util import ListSpace, ScoreModel
    space = ListSpace([DEFAULT] + [{"kind": "x", "v": v} for v in (1, 5, 3)])
    search = TaskSearch(task=None, space=space, model=ScoreModel(warm=True), rng=random.Random(0))
    assert [c.get("v") for c in search.next_batch(4)] == [None, 5, 3, 1]
    search.model = None                       # cold: the space's order
    assert [c.get("v") for c in search.next_batch(4)] == [None, 1, 5, 3]
