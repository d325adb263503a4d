"""The learned cost model: ranks held-out points of a known function, falls back to the analytic prior,
survives save/load, and warm-starts from a tuning database."""
import sys

import numpy as np
import pytest

from tensorforge.errors import TensorforgeError
from tensorforge.tune import cost_model
from tensorforge.tune.cost_model import CostModel, relative_log_throughput, spearman
from tensorforge.tune.features import FEATURE_NAMES, INDEX

D = len(FEATURE_NAMES)
pytest.importorskip("lightgbm")


def synthetic(n: int, tasks: int, seed: int = 0):
    """Rows of ``tasks`` tasks whose seconds follow a known nonlinear function of three features (the
    task only scales them); the roofline feature holds noise, so the trees must do the ranking."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 1, size=(n, D))
    groups = rng.integers(0, tasks, n)
    X[:, INDEX["est_seconds"]] = rng.normal(-10, 0.1, n)
    a, b, c = INDEX["vec_frac"], INDEX["par_balance"], INDEX["reg_occupancy"]
    log_s = -1.5 * X[:, a] - 1.0 * X[:, b] + 2.0 * (X[:, c] - 0.6) ** 2 + 0.5 * groups
    return X, np.exp(log_s), groups.astype(str)


def test_ranks_held_out_points_of_a_known_function():
    X, s, g = synthetic(700, tasks=5)
    m = CostModel()
    m.fit(X[:500], s[:500], g[:500])
    assert m.trained and m.rows == 500
    score = m.predict(X[500:])
    for task in np.unique(g[500:]):     # scores are comparable within a task
        sel = g[500:] == task
        assert spearman(score[sel], -s[500:][sel]) > 0.8


def test_lambdarank_objective_also_ranks():
    X, s, g = synthetic(700, tasks=5, seed=1)
    m = CostModel(objective="lambdarank")
    m.fit(X[:500], s[:500], g[:500])
    sel = g[500:] == "2"
    assert spearman(m.predict(X[500:])[sel], -s[500:][sel]) > 0.7


@pytest.mark.parametrize("prior", ["fit", "full"])
def test_boosting_from_the_prior_still_ranks(prior):
    """With the prior as init score, a prior that is pure noise (as in ``synthetic``) is corrected."""
    X, s, g = synthetic(700, tasks=5, seed=8)
    m = CostModel(prior=prior)
    m.fit(X[:500], s[:500], g[:500])
    assert 0.0 <= m.prior_weight <= 1.0 and (prior == "fit" or m.prior_weight == 1.0)
    sel = g[500:] == "3"
    assert spearman(m.predict(X[500:])[sel], -s[500:][sel]) > 0.7


def test_unknown_options_raise():
    with pytest.raises(ValueError, match="prior"):
        CostModel(prior="sometimes")
    with pytest.raises(ValueError, match="objective"):
        CostModel(objective="huber")


def test_untrained_model_ranks_by_the_roofline_prior():
    X = np.zeros((4, D))
    X[:, INDEX["est_seconds"]] = np.log2([1e-3, 1e-4, 1e-2, 5e-4])
    m = CostModel()
    assert not m.trained
    np.testing.assert_allclose(m.predict(X), -np.log([1e-3, 1e-4, 1e-2, 5e-4]), rtol=1e-12)
    m.fit(X, [1.0, 2.0, 3.0, 4.0], ["t"] * 4)          # fewer rows than min_rows: still the prior
    assert not m.trained
    assert list(np.argsort(-m.predict(X))) == [1, 3, 0, 2]


def test_update_adds_rows_and_trains():
    X, s, g = synthetic(300, tasks=3, seed=2)
    m = CostModel()
    m.update(X[:4], s[:4], g[:4])
    assert not m.trained
    m.update(X[4:200], s[4:200], g[4:200])
    assert m.trained and m.rows == 200
    sel = g[200:] == "1"
    assert spearman(m.predict(X[200:])[sel], -s[200:][sel]) > 0.7


def test_failed_and_non_finite_rows_are_dropped():
    X, s, g = synthetic(60, tasks=2, seed=3)
    s[:5] = np.inf
    X[5, 0] = np.nan
    m = CostModel()
    m.fit(X, s, g)
    assert m.rows == 54


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="features"):
        CostModel().predict(np.zeros((2, D - 1)))
    with pytest.raises(ValueError, match="CostModel needs"):
        CostModel().fit(np.zeros((3, D)), [1.0, 2.0], ["a"] * 3)


def test_save_load_round_trip(tmp_path):
    X, s, g = synthetic(300, tasks=3, seed=4)
    m = CostModel()
    m.fit(X[:200], s[:200], g[:200])
    m.save(tmp_path / "model.npz")
    back = CostModel.load(tmp_path / "model.npz")
    assert back.trained and back.rows == 200 and back.prior_weight == m.prior_weight
    np.testing.assert_allclose(back.predict(X[200:]), m.predict(X[200:]), rtol=1e-12)
    back.update(X[200:], s[200:], g[200:])            # the samples came back too
    assert back.rows == 300
    empty = CostModel()
    empty.save(tmp_path / "empty.npz")
    assert not CostModel.load(tmp_path / "empty.npz").trained


def test_load_rejects_garbage_and_other_layouts(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a model")
    with pytest.raises(TensorforgeError, match="delete it"):
        CostModel.load(bad)
    other = tmp_path / "other.npz"
    np.savez(other, X=np.zeros((0, 3)), seconds=np.zeros(0), groups=np.zeros(0, dtype=str),
             meta=np.array('{"feature_names": ["a", "b", "c"]}'), model=np.array(""))
    with pytest.raises(TensorforgeError, match="feature layout"):
        CostModel.load(other)


def test_without_lightgbm_falls_back_to_the_prior_with_a_warning(monkeypatch):
    monkeypatch.setitem(sys.modules, "lightgbm", None)       # import lightgbm -> ImportError
    monkeypatch.setattr(cost_model, "_warned", False)
    X, s, g = synthetic(100, tasks=2, seed=5)
    m = CostModel()
    with pytest.warns(RuntimeWarning, match=r"tensorforge\[tune\]"):
        m.fit(X, s, g)
    assert not m.trained
    np.testing.assert_allclose(m.predict(X), -np.log(np.exp2(X[:, INDEX["est_seconds"]])))


def test_relative_log_throughput_is_zero_at_each_tasks_best():
    y = relative_log_throughput(np.array([2.0, 1.0, 4.0, 10.0, 1e6]), np.array(["a", "a", "a", "b", "b"]))
    np.testing.assert_allclose(y[:4], [np.log(0.5), 0.0, np.log(0.25), 0.0])
    assert y[4] == pytest.approx(-np.log(32.0))              # clipped


def test_spearman_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(6)
    a = rng.normal(size=50)
    b = a + rng.normal(size=50)
    b[:5] = b[5]                                                 # ties
    assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)


def test_warm_start_from_a_tuning_database(tmp_path):
    database = pytest.importorskip("tensorforge.tune.database")
    X, s, g = synthetic(240, tasks=3, seed=7)
    with database.TuningDatabase(tmp_path / "tune.sqlite") as db:
        for task in np.unique(g):
            db.add_workload(database.Workload(key=f"w{task}", description={"kernel": "synthetic"}))
        records = [database.Record(workload_key=f"w{t}", target_key="cpu", config={"i": i},
                                   latencies=(float(sec),)) for i, (t, sec) in enumerate(zip(g[:200], s[:200]))]
        records.append(database.Record(workload_key="w0", target_key="cpu", config={"i": -1}, latencies=(),
                                       error="timeout"))
        records.append(database.Record(workload_key="w0", target_key="other-cpu", config={"i": 0},
                                       latencies=(1.0,)))
        db.add_records(records)
        seen = []

        def featurize(w, r):
            seen.append(r.config["i"])
            return None if r.config["i"] == 3 else X[r.config["i"]]

        m = CostModel.warm_start(db, "cpu", featurize)
    assert sorted(seen) == list(range(200))       # failed and foreign-target records are not featurized
    assert m.trained and m.rows == 199
    sel = g[200:] == "0"
    assert spearman(m.predict(X[200:])[sel], -s[200:][sel]) > 0.7
