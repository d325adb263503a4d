"""The learned cost model: ranks candidate schedules of a task before they are built and timed.

Why gradient-boosted trees (LightGBM): features mix counts, ratios and flags whose effect on time is
piecewise (a tile fits L1 or it does not), a few hundred to tens of thousands of rows must train in
well under a second on one core, and the model must not pull in torch or a GPU stack.  LightGBM
(3.5 MB wheel, numpy + scipy) trains 10^4 rows in a fraction of a second and has a native
lambdarank objective grouped by task; xgboost-cpu (5.6 MB, no Python 3.11 build of its newest
release) would do as well but offers nothing more here.

Targets are normalised per task so that one model serves every task: a row's label is
``log(best seconds of its task / its seconds)`` (0 for the fastest, negative for slower ones,
clipped at 1/32 of the best), so kernels of very different sizes share one scale and the trees
learn what makes a schedule *relatively* fast.  Scores are comparable within a task only.

An analytic prior, the roofline estimate the features carry (``features.estimate_seconds``), ranks
while the model is untrained (no samples yet, or LightGBM not installed), so the search is guided
from the first batch on.  Once trained, the trees boost from it (``prior="full"``, the default):
its per-task-normalised score is LightGBM's ``init_score`` and is added back at prediction, so the
trees learn corrections to the roofline rather than the whole ranking; ``"fit"`` scales it by a
least-squares factor first, ``"none"`` leaves the estimate one feature among others.  With the
convolution's features describing the GEMMs that really run (Winograd: 16 GEMMs of O x C x tiles),
boosting from the prior found a candidate within 90% of the best in fewer trials than random search
on all three evaluated kernels; ``"none"`` did not on the softmax (docs/cost_model.md).
"""
from __future__ import annotations

import json
import math
import os
import warnings
from typing import TYPE_CHECKING, AbstractSet, Callable, Iterable

import numpy as np

from ..errors import TensorforgeError
from .features import FEATURE_NAMES, INDEX, estimate_seconds

if TYPE_CHECKING:   # pragma: no cover
    from .database import Record, TuningDatabase, Workload

PRIOR_MODES = ("fit", "full", "none")   # init score: least-squares weight of the prior, all of it, none
MIN_ROWS = 8                         # fewer samples than this: the prior alone ranks
CLIP = math.log(32.0)                # labels below log(1/32) of the task's best are all "bad"
FAMILIES = ("loop", "gemm", "conv")  # kernel kinds a transfer model is trained and applied per
TRANSFER_ALPHAS = (0.0, 0.25, 0.5, 1.0)   # weights of the transfer trees tried by cross-validation
TRANSFER_MIN_GROUPS = 3              # fewer workloads of a family than this: its transfer weight is 0
INSTALL_HINT = "pip install 'tensorforge[tune]' (LightGBM) for the learned cost model"
_warned = False


def _lightgbm():
    """The lightgbm module, or None (once warned) when it is not installed."""
    global _warned
    try:
        import lightgbm
    except ImportError:
        if not _warned:
            warnings.warn(f"LightGBM is not installed: the auto-tuner ranks candidates by an analytic estimate "
                          f"only; {INSTALL_HINT}", RuntimeWarning, stacklevel=3)
            _warned = True
        return None
    return lightgbm


def _group_ids(groups) -> np.ndarray:
    return np.unique(np.asarray(groups).astype(str), return_inverse=True)[1]


def family_of(X: np.ndarray) -> np.ndarray:
    """Index into ``FAMILIES`` per feature row: loop nest, plain contraction or convolution."""
    X = np.atleast_2d(X)
    gemm = X[:, INDEX["is_gemm"]] > 0.5
    conv = X[:, INDEX["gemm_conv"]] > 0.5
    return np.where(gemm, np.where(conv, 2, 1), 0)


def relative_log_throughput(values: np.ndarray, groups: np.ndarray, higher_is_better: bool = False) -> np.ndarray:
    """Per group: ``log(best / value)`` for seconds (or ``log(value / best)`` for scores), clipped at -CLIP."""
    ids = _group_ids(groups)
    logs = np.log(np.maximum(np.asarray(values, dtype=np.float64), 1e-12))
    if higher_is_better:
        logs = -logs
    best = np.full(ids.max() + 1 if len(ids) else 0, np.inf)
    np.minimum.at(best, ids, logs)
    return np.maximum(best[ids] - logs, -CLIP)


def featurized_records(db: "TuningDatabase", target_key: str,
                       featurize: Callable[["Workload", "Record"], np.ndarray | None], skip: AbstractSet[str] = frozenset()):
    """(workload key, median seconds, feature row) of every successful record on ``target_key`` of the
    workloads not in ``skip``; a record ``featurize`` cannot rebuild (None, or an error: a config the
    current space no longer has) is left out rather than stopping the tune."""
    for w in db.workloads():
        if w.key in skip:
            continue
        for r in db.records(w.key, target_key):
            if not r.ok:
                continue
            try:
                x = featurize(w, r)
            except Exception:       # noqa: BLE001 - a stale record must not stop tuning
                continue
            if x is not None:
                yield w.key, r.median_s, np.asarray(x, dtype=np.float64)


class CostModel:
    """Scores candidates (higher = faster) from feature rows; see the module docstring."""

    def __init__(self, *, objective: str = "regression", rounds: int = 100, seed: int = 0,
                 min_rows: int = MIN_ROWS, prior: str = "full") -> None:
        if objective not in ("regression", "lambdarank"):
            raise ValueError(f"CostModel objective must be 'regression' or 'lambdarank', got {objective!r}")
        if prior not in PRIOR_MODES:
            raise ValueError(f"CostModel prior must be one of {PRIOR_MODES}, got {prior!r}")
        self.objective, self.rounds, self.seed, self.min_rows, self.prior = objective, rounds, seed, min_rows, prior
        self.trained = False
        self.prior_weight = 1.0
        self._booster = None
        self._X = np.zeros((0, len(FEATURE_NAMES)))
        self._seconds = np.zeros(0)
        self._groups = np.zeros(0, dtype=str)
        # the transfer part (``fit_transfer``): records of OTHER workloads, one booster per family
        self._tX = np.zeros((0, len(FEATURE_NAMES)))
        self._tseconds = np.zeros(0)
        self._tgroups = np.zeros(0, dtype=str)
        self._transfer: dict[int, tuple[float, object]] = {}     # family -> (weight, booster)

    # ---- data ------------------------------------------------------------------------------------------
    @property
    def rows(self) -> int:
        """Samples of the tasks being tuned (``fit``/``update``)."""
        return len(self._seconds)

    @property
    def transfer_rows(self) -> int:
        """Samples of other workloads the transfer part learned from (``fit_transfer``)."""
        return len(self._tseconds)

    @property
    def transfer_weights(self) -> dict[str, float]:
        """Per family, the cross-validated weight of its transfer trees (0: the roofline alone)."""
        return {FAMILIES[f]: w for f, (w, _) in sorted(self._transfer.items())}

    @property
    def warm(self) -> bool:
        """Whether a transfer model changes the prior of some family."""
        return any(w > 0 for w, _ in self._transfer.values())

    @staticmethod
    def _check(X, seconds, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        seconds = np.asarray(seconds, dtype=np.float64).reshape(-1)
        groups = np.asarray(groups).astype(str).reshape(-1)
        if X.shape[1] != len(FEATURE_NAMES) or not (len(X) == len(seconds) == len(groups)):
            raise ValueError(f"CostModel needs X of shape (n, {len(FEATURE_NAMES)}) with n seconds and n groups, "
                             f"got {X.shape}, {seconds.shape}, {groups.shape}")
        keep = np.isfinite(seconds) & (seconds > 0) & np.all(np.isfinite(X), axis=1)
        return X[keep], seconds[keep], groups[keep]

    def fit(self, X: np.ndarray, seconds: np.ndarray, groups: np.ndarray) -> None:
        """Trains on exactly these samples (seconds: measured medians; groups: task id per row).
        Rows with a failed (non-finite) time or non-finite features are dropped."""
        self._X, self._seconds, self._groups = self._check(X, seconds, groups)
        self._train()

    def update(self, X: np.ndarray, seconds: np.ndarray, groups: np.ndarray) -> None:
        """Adds samples (a measured batch) and retrains on everything seen."""
        X, seconds, groups = self._check(X, seconds, groups)
        self._X = np.concatenate([self._X, X])
        self._seconds = np.concatenate([self._seconds, seconds])
        self._groups = np.concatenate([self._groups, groups])
        self._train()

    # ---- training ----------------------------------------------------------------------------------------
    @staticmethod
    def _roofline(X: np.ndarray) -> np.ndarray:
        """The roofline score: -log(estimated seconds)."""
        return -np.log(np.maximum(estimate_seconds(X), 1e-12))

    def _prior(self, X: np.ndarray) -> np.ndarray:
        """What the task's own trees boost from: the roofline score plus, per family, the weighted
        transfer trees learned from other workloads (``fit_transfer``)."""
        prior = self._roofline(X)
        if self._transfer and len(X):
            fam = family_of(X)
            for f, (w, booster) in self._transfer.items():
                rows = fam == f
                if w > 0 and booster is not None and rows.any():
                    prior[rows] += w * booster.predict(X[rows], raw_score=True)
        return prior

    # ---- transfer from other workloads ------------------------------------------------------------------
    def fit_transfer(self, X: np.ndarray, seconds: np.ndarray, groups: np.ndarray) -> None:
        """Learns from records of OTHER workloads (the warm start, ``warm.py``): per kernel family
        (``family_of``) a booster of per-workload relative throughput, boosting from the roofline;
        its weight in the prior (``TRANSFER_ALPHAS``) is chosen by leave-workloads-out
        cross-validation on that family, scored by how close to its workload's best the top-ranked
        held-out candidate is, so a family whose records do not transfer keeps the roofline alone.
        The task's own samples (``update``) then train trees boosting from this prior."""
        self._tX, self._tseconds, self._tgroups = self._check(X, seconds, groups)
        self._transfer = {}
        lgb = _lightgbm()
        if lgb is None or not len(self._tseconds):
            return
        fam = family_of(self._tX)
        for f in range(len(FAMILIES)):
            rows = fam == f
            X_f, s_f, g_f = self._tX[rows], self._tseconds[rows], self._tgroups[rows]
            names = np.unique(g_f)
            y = relative_log_throughput(s_f, g_f) if len(s_f) else s_f
            if len(names) < TRANSFER_MIN_GROUPS or len(s_f) < self.min_rows or not np.any(y < -1e-9):
                continue
            weight = self._transfer_weight(lgb, X_f, y, g_f, names)
            booster = self._booster_on(lgb, X_f, y, g_f) if weight > 0 else None
            self._transfer[f] = (weight, booster)

    def _booster_on(self, lgb, X: np.ndarray, y: np.ndarray, groups: np.ndarray):
        init = relative_log_throughput(np.exp(self._roofline(X)), groups, higher_is_better=True)
        params = self._params(len(y))
        params["objective"] = "regression"
        data = lgb.Dataset(X, label=y, init_score=init, feature_name=list(FEATURE_NAMES), params=params)
        return lgb.train(params, data, num_boost_round=self.rounds)

    def _transfer_weight(self, lgb, X: np.ndarray, y: np.ndarray, groups: np.ndarray, names: np.ndarray) -> float:
        folds = min(5, len(names))
        fold_of = {n: i % folds for i, n in enumerate(names)}
        fold = np.array([fold_of[g] for g in groups])
        roof = self._roofline(X)
        trees = np.zeros(len(y))
        for k in range(folds):
            test = fold == k
            train = ~test
            if not np.any(y[train] < -1e-9):
                continue
            trees[test] = self._booster_on(lgb, X[train], y[train], groups[train]).predict(X[test], raw_score=True)
        ids = _group_ids(groups)
        best_alpha, best_score = 0.0, -math.inf
        for alpha in TRANSFER_ALPHAS:
            score = roof + alpha * trees
            # per held-out workload: relative throughput of the candidate this ranking puts first
            top = [y[ids == g][np.argmax(score[ids == g])] for g in range(ids.max() + 1)]
            value = float(np.mean(top))
            if value > best_score + 1e-9:
                best_alpha, best_score = alpha, value
        return best_alpha

    def _params(self, n: int) -> dict:
        p = {"objective": self.objective, "learning_rate": 0.1, "num_leaves": 31, "max_depth": 8, "max_bin": 63,
             "min_data_in_leaf": max(2, min(20, n // 25)), "min_data_in_bin": 1, "feature_fraction": 0.9,
             "lambda_l2": 1.0, "num_threads": 1, "deterministic": True, "force_row_wise": True, "seed": self.seed,
             "verbosity": -1}
        if self.objective == "lambdarank":
            p.update({"lambdarank_truncation_level": 64, "label_gain": [float(2 ** i - 1) for i in range(9)]})
        return p

    def _train(self) -> None:
        self.trained = False
        self._booster = None
        y = relative_log_throughput(self._seconds, self._groups)
        if self.rows < self.min_rows or not np.any(y < -1e-9):
            return
        lgb = _lightgbm()
        if lgb is None:
            return
        prior = relative_log_throughput(np.exp(self._prior(self._X)), self._groups, higher_is_better=True)
        denom = float(prior @ prior)
        if self.prior == "fit":
            self.prior_weight = float(np.clip((prior @ y) / denom, 0.0, 1.0)) if denom > 0 else 0.0
        else:
            self.prior_weight = 1.0 if self.prior == "full" else 0.0
        init = self.prior_weight * prior
        params = self._params(self.rows)
        if self.objective == "lambdarank":
            order = np.argsort(_group_ids(self._groups), kind="stable")
            ids = _group_ids(self._groups)[order]
            sizes = np.bincount(ids)
            label = np.clip(np.floor(8.0 * (1.0 + y[order] / CLIP)), 0, 8).astype(int)
            data = lgb.Dataset(self._X[order], label=label, group=sizes[sizes > 0], init_score=init[order],
                               feature_name=list(FEATURE_NAMES), params=params)
        else:
            data = lgb.Dataset(self._X, label=y, init_score=init, feature_name=list(FEATURE_NAMES), params=params)
        self._booster = lgb.train(params, data, num_boost_round=self.rounds)
        self.trained = True

    # ---- use -----------------------------------------------------------------------------------------------
    def predict(self, X: np.ndarray) -> np.ndarray:
        """A score per row, higher = faster; comparable between candidates of one task."""
        X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        if X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"CostModel.predict needs rows of {len(FEATURE_NAMES)} features, got {X.shape[1]}")
        prior = self._prior(np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0))
        if not self.trained or self._booster is None:
            return prior
        return self.prior_weight * prior + self._booster.predict(X, raw_score=True)

    @classmethod
    def warm_start(cls, db: "TuningDatabase", target_key: str,
                   featurize: Callable[["Workload", "Record"], np.ndarray | None], **options) -> "CostModel":
        """A model trained on every successful record the database holds for ``target_key`` (all tasks, all
        models).  ``featurize(workload, record)`` gives a record's feature row, or None to skip it (a
        config the current space cannot rebuild); one that raises is skipped too."""
        model = cls(**options)
        rows, seconds, groups = [], [], []
        for key, median, x in featurized_records(db, target_key, featurize):
            rows.append(x)
            seconds.append(median)
            groups.append(key)
        if rows:
            model.fit(np.stack(rows), np.asarray(seconds), np.asarray(groups))
        return model

    # ---- persistence -----------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> None:
        """One .npz file: the samples (so ``update`` keeps working after ``load``) and the trees."""
        meta = {"feature_names": list(FEATURE_NAMES), "objective": self.objective, "rounds": self.rounds,
                "prior": self.prior,
                "seed": self.seed, "min_rows": self.min_rows, "prior_weight": self.prior_weight,
                "trained": self.trained}
        model = self._booster.model_to_string() if self._booster is not None else ""
        tmp = f"{os.fspath(path)}.tmp.npz"
        transfer = [[f, w, b.model_to_string() if b is not None else ""] for f, (w, b) in self._transfer.items()]
        np.savez_compressed(tmp, X=self._X, seconds=self._seconds, groups=self._groups,
                            meta=np.array(json.dumps(meta)), model=np.array(model),
                            tX=self._tX, tseconds=self._tseconds, tgroups=self._tgroups,
                            transfer=np.array(json.dumps(transfer)))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostModel":
        try:
            with np.load(path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                X, seconds, groups, model_text = z["X"], z["seconds"], z["groups"], str(z["model"])
                has_transfer = "transfer" in z.files
                if has_transfer:
                    tX, tseconds, tgroups = z["tX"], z["tseconds"], z["tgroups"]
                    transfer = json.loads(str(z["transfer"]))
        except (OSError, ValueError, KeyError) as exc:
            raise TensorforgeError(f"cannot read cost model {os.fspath(path)!r} ({exc}); delete it to retrain "
                                   f"from the tuning database") from exc
        if meta.get("feature_names") != list(FEATURE_NAMES):
            raise TensorforgeError(f"cost model {os.fspath(path)!r} was saved with another feature layout "
                                   f"(an older tensorforge); delete it to retrain from the tuning database")
        m = cls(objective=meta["objective"], rounds=meta["rounds"], seed=meta["seed"], min_rows=meta["min_rows"],
                prior=meta.get("prior", "fit"))
        m._X, m._seconds, m._groups = X, seconds, groups
        m.prior_weight = float(meta["prior_weight"])
        lgb = _lightgbm() if (meta["trained"] and model_text) or (has_transfer and transfer) else None
        if has_transfer:
            m._tX, m._tseconds, m._tgroups = tX, tseconds, tgroups
            if lgb is not None:
                m._transfer = {int(f): (float(w), lgb.Booster(model_str=b) if b else None) for f, w, b in transfer}
        if meta["trained"] and model_text:
            if lgb is not None:
                m._booster = lgb.Booster(model_str=model_text)
                m.trained = True
        return m


def spearman(a: Iterable[float], b: Iterable[float]) -> float:
    """Spearman rank correlation (average ranks for ties): how the evaluation scores a ranking."""
    a, b = np.asarray(list(a), dtype=np.float64), np.asarray(list(b), dtype=np.float64)
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = math.sqrt(float(ra @ ra) * float(rb @ rb))
    return float(ra @ rb / denom) if denom > 0 else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=np.float64)
    uniq, inv = np.unique(x, return_inverse=True)
    sums = np.bincount(inv, weights=ranks)
    counts = np.bincount(inv)
    return (sums / counts)[inv]
