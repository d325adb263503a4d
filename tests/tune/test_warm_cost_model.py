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
        assert first.trained and not getattr(first, "cached", False)
        assert len(list(cache_dir().glob("warm-*.npz"))) == 1
        again = warm_cost_model(d, key)
        assert getattr(again, "cached", False) and again.rows == first.rows
        X = np.asarray([v for _, _, v in d.featured_records(key, FEATURE_LAYOUT)])
        np.testing.assert_allclose(again.predict(X), first.predict(X))
        # A few more records (under RETRAIN_GROWTH): still the cached model.
        w = d.workloads()[0]
        d.add_records([Record(w.key, key, {"kind": "loop", "trace": {"n": 1}}, (1.0,))])
        assert getattr(warm_cost_model(d, key), "cached", False)
        grow = int(first.rows * RETRAIN_GROWTH) + 1
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
    assert models and models[0].trained and models[0].rows >= 16
    with TuningDatabase(db, readonly=True) as d:
        assert not any(k in {w.key for w in d.workloads()[:2]} for k in seen)
