"""Configs that won on similar workloads: the warm start's first candidates for a new task.

The warm cost model (``warm.py``) ranks candidates, but its first batch can only rank what the
search proposes, and before any measurement of the task that is the space's hand-picked seeds
plus random samples.  The database knows more than a ranking: the configs that were *fastest*
on other workloads of the same kind on this target.  A register tile, a cache block or an
algorithm that won on a neighbouring shape is a far better first guess than a random sample (Ansor
and MetaSchedule seed their first population from the database's top records the same way).

**Neighbours.**  Workloads of the tuned task's kind (GEMM, conv, loop) on the same target, nearest
first by the distance below; for a loop nest only workloads of the same kernel (its name, which
comes from the fused ops), since a schedule trace replays only on a nest of the same structure.

* contractions: ``sum |log2(a / b)|`` over M, N, K and the batch; convolutions only with the same
  window and strides (a 7x7/2 stem's winner, often another algorithm, misleads a 3x3/1 conv:
  measured, such configs ran 2-3x slower than the default);
* loop nests: ``|log2|`` of the ratio of bytes moved plus that of flops.

**Configs.**  Each neighbour's ``per_workload`` fastest successful non-default records, nearest
neighbour first, deduplicated; at most ``limit``.  What a config left to the compiler is spelled
out as the neighbour got it (``absolute``: a convolution's ``conv_algorithm`` "" becomes the
algorithm the tensorizer chose there), since the compiler may choose otherwise here.  They are
only *proposed*: the search checks each one against its own space (an illegal tile or a trace
that does not replay is dropped, never built) and measures them right after the untuned default,
nearest neighbour first: that order, not the warm model's, since the model's transfer weight is
often small and a neighbour's winner is the stronger evidence.
"""
from __future__ import annotations

import math
import re

from .database import canonical_config
from .tasks import Task


def _log_gap(a, b) -> float:
    a, b = float(a or 0), float(b or 0)
    if a <= 0 or b <= 0:
        return 0.0 if a == b else 4.0
    return abs(math.log2(a / b))


def _kernel_name(name: str) -> str:
    """A kernel's name without the numbering that tells two of one model apart."""
    return re.sub(r"(_\d+)+$", "", name or "")


def distance(task: dict, other: dict) -> float | None:
    """How far workload description ``other`` is from ``task``'s (both ``Task.description()``
    dicts); None when its configs cannot apply (another kind or another loop kernel)."""
    if task.get("kind") != other.get("kind"):
        return None
    if task["kind"] == "loop":
        if _kernel_name(task.get("kernel", "")) != _kernel_name(other.get("kernel", "")):
            return None
        return _log_gap(task.get("bytes"), other.get("bytes")) + _log_gap(task.get("flops"), other.get("flops"))
    p, q = task.get("problem") or {}, other.get("problem") or {}
    cp, cq = p.get("conv") or {}, q.get("conv") or {}
    if (cp.get("kernel"), cp.get("strides")) != (cq.get("kernel"), cq.get("strides")):
        return None
    return sum(_log_gap(p.get(k, 1), q.get(k, 1)) for k in ("M", "N", "K", "batch"))


def transferred_configs(database, task: Task, target_key: str, *, neighbours: int = 6, per_workload: int = 2,
                        limit: int = 12, workloads: list | None = None) -> list[dict]:
    """The fastest configs of ``task``'s nearest workloads in ``database`` (see the module
    docstring); ``workloads``: ``database.workloads()`` when the caller already has it (a tune
    asks for every one of its tasks)."""
    mine = task.description()
    near, descriptions = [], {}
    for w in database.workloads() if workloads is None else workloads:
        if w.key == task.key:
            continue
        d = distance(mine, w.description or {})
        if d is not None:
            near.append((d, w.key))
            descriptions[w.key] = w.description or {}
    near.sort()
    out, seen = [], set()
    used = 0
    for _, key in near:
        if used >= neighbours or len(out) >= limit:
            break
        ok = sorted((r for r in database.records(key, target_key) if r.ok and r.config.get("kind") != "default"),
                    key=lambda r: r.median_s)
        if not ok:
            continue
        used += 1
        for r in ok[:per_workload]:
            config = absolute(r.config, descriptions[key])
            c = canonical_config(config)
            if c not in seen and len(out) < limit:
                seen.add(c)
                out.append(config)
    return out


def absolute(config: dict, description: dict) -> dict:
    """``config`` with what it left to the compiler spelled out as its workload got it: a
    convolution config's ``conv_algorithm`` "" means "the tensorizer decides", which chose the
    direct kernel for a small neighbour and may choose Winograd here; what won there was direct."""
    params = config.get("params")
    chosen = ((description.get("problem") or {}).get("conv") or {}).get("algorithm")
    if config.get("kind") != "gemm" or not isinstance(params, dict) or params.get("conv_algorithm", "") != "":
        return config
    from ..codegen.c.microkernels import CONV_ALGORITHMS
    if not chosen or chosen not in CONV_ALGORITHMS:
        return config
    return {**config, "params": {**params, "conv_algorithm": chosen}}


__all__ = ["absolute", "distance", "transferred_configs"]
