"""The warm cost model: what ranks a new task's first batch, learned from the database.

A task nobody tuned before has no records, so a model trained only on its own measurements ranks
its first batches by the roofline prior alone.  The database, though, usually holds thousands of
records of *other* kernels on the same target (other models, other shapes), and the features
(``features.py``) describe a candidate relative to its kernel, with labels normalised per task
(``cost_model.py``).  So a model trained on those records already knows, e.g., which register
tiles the micro-kernel runs well or that a reduction wants its rows resident in L1.

**Training set.** Every successful record on the tuned target whose feature row is stored in the
database (``record_features``, written by ``TaskSearch.commit`` in the batch's transaction, so
records of a model that is not being tuned now are usable without its kernels), plus, for
workloads whose records have no stored rows (databases written before this), whatever
``featurize(workload, record)`` can rebuild (GEMM/conv records from their description; loop
records only for tasks of the current tune).  Groups are workload keys, as in ``CostModel``.

**Model.** ``CostModel.fit_transfer``: the records are split by kernel family (loop nest, plain
contraction, convolution: ``cost_model.family_of``), and per family a booster learns each
record's throughput relative to its own workload's best (``log(best / seconds)``, so problem size
drops out), boosting from the roofline estimate.  How much of it enters the new task's prior is
chosen per family by leave-workloads-out cross-validation (weights 0, 1/4, 1/2, 1: the one whose
top-ranked held-out candidate comes closest to its workload's best), so a family whose records
do not transfer keeps the roofline alone, and a family with fewer than 3 workloads gets none.
The tuned task's own measurements train separate trees that boost from that prior: after the
first batch the task's own data corrects the transfer instead of being outvoted by thousands of
foreign rows.  With a warm model, the space's hand-picked seeds are still all measured first
(the default first of all) but in the order the model predicts.

**Cache.** The trained model (its samples and trees, ``CostModel.save``) is kept in
``$TENSORFORGE_CACHE/cost_models/warm-<K>.npz`` with ``warm-<K>.json`` beside it, where K hashes
``MODEL_VERSION``, the target key, the feature layout (``features.FEATURE_LAYOUT``) and the
database file's path;
the JSON records the database's content version for the target when the model was trained
(successful records, largest record id).

**Retraining.** The cached model is reused while the target's successful records have grown by
less than ``RETRAIN_GROWTH`` (25%) since it was trained; it is retrained when they grew by that
much, when they shrank or the largest record id went down (another file at the same path), when
the cache is unreadable, or when the feature layout or model version changed (another K).  During
a tune the model also learns every measured batch in memory (``CostModel.update``: the task's own
trees, on top of the transfer prior), so the new task's later batches are ranked by both.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Callable

import numpy as np

from .cost_model import CostModel, featurized_records
from .features import FEATURE_LAYOUT

RETRAIN_GROWTH = 0.25
MODEL_VERSION = "transfer-2"     # what the cache holds (part of K): a per-family transfer model


def cache_dir() -> Path:
    """Where warm models are kept: ``cost_models`` in tensorforge's cache folder."""
    root = os.environ.get("TENSORFORGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tensorforge")
    return Path(root) / "cost_models"


def cache_key(target_key: str, db_path: str) -> str:
    """K of the cache files: target, feature layout and database file."""
    text = f"{MODEL_VERSION}|{target_key}|{FEATURE_LAYOUT}|{os.path.realpath(db_path)}"
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def training_set(database, target_key: str,
                 featurize: Callable | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, seconds, workload keys) the warm model trains on; see the module docstring."""
    rows, seconds, groups = [], [], []
    for wk, median, vector in database.featured_records(target_key, FEATURE_LAYOUT):
        rows.append(vector)
        seconds.append(median)
        groups.append(wk)
    if featurize is not None:
        for key, median, x in featurized_records(database, target_key, featurize, skip=set(groups)):
            rows.append(x)
            seconds.append(median)
            groups.append(key)
    if not rows:
        return np.zeros((0, 0)), np.zeros(0), np.zeros(0, dtype=str)
    return np.asarray(rows, dtype=np.float64), np.asarray(seconds), np.asarray(groups)


def warm_cost_model(database, target_key: str, featurize: Callable | None = None, *,
                    cache: bool = True, growth: float = RETRAIN_GROWTH, **options) -> CostModel:
    """The warm model for ``target_key``: the cached one while still fresh, else trained now (and
    cached).  ``featurize``: the fallback for records without stored feature rows; ``cache=False``
    always trains and writes nothing (``options`` go to ``CostModel``)."""
    n_ok, top_id = database.content_version(target_key)
    path = getattr(database, "path", None)
    files = None
    if cache and path is not None:
        key = cache_key(target_key, os.fspath(path))
        files = cache_dir() / f"warm-{key}.npz", cache_dir() / f"warm-{key}.json"
        cached = _load_fresh(files, n_ok, top_id, growth)
        if cached is not None:
            return cached
    model = CostModel(**options)
    X, seconds, groups = training_set(database, target_key, featurize)
    if len(seconds):
        model.fit_transfer(X, seconds, groups)
    if files is not None and len(seconds):
        _save(model, files, {"target_key": target_key, "db": os.fspath(path), "layout": FEATURE_LAYOUT,
                             "records_ok": n_ok, "max_id": top_id, "rows": int(model.transfer_rows),
                             "weights": model.transfer_weights, "created": time.time()})
    return model


def _load_fresh(files: tuple[Path, Path], n_ok: int, top_id: int, growth: float) -> CostModel | None:
    """The cached model when it exists and the database has not outgrown it, else None."""
    npz, meta_path = files
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("layout") != FEATURE_LAYOUT:
            return None
        was, was_top = int(meta["records_ok"]), int(meta["max_id"])
        if n_ok < was or top_id < was_top or n_ok >= max(was + 1, was * (1.0 + growth)):
            return None
        model = CostModel.load(npz)
    except Exception:       # noqa: BLE001 - missing or unreadable cache: retrain
        return None
    model.cached = True
    return model


def _save(model: CostModel, files: tuple[Path, Path], meta: dict) -> None:
    npz, meta_path = files
    try:
        npz.parent.mkdir(parents=True, exist_ok=True)
        model.save(npz)
        tmp = meta_path.with_name(f".{meta_path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(meta))
        os.replace(tmp, meta_path)
    except OSError:          # a read-only cache folder: the model still serves this run
        pass


__all__ = ["MODEL_VERSION", "RETRAIN_GROWTH", "cache_dir", "cache_key", "training_set", "warm_cost_model"]
