"""The auto-tuner: tasks of a model, schedule spaces, measurement, search and the tuning database.

    report = tensorforge.tune(model, example_inputs, trials=64, db="tuning.sqlite")
    cm = tensorforge.compile(model, example_inputs, db="tuning.sqlite")   # applies the best records

Modules: ``tasks`` (the distinct kernels of a model), ``space`` (per-task candidate configs),
``measure`` (build in parallel, time in an isolated process), ``search`` (evolutionary search guided
by the cost model), ``scheduler`` (trials across tasks), ``apply`` (records -> codegen overrides),
``api`` (``tune``), ``database`` (storage), ``features`` + ``cost_model`` (the learned ranking),
``warm`` (the cost model trained on the database's other workloads, cached), ``multi`` (several
models in one tune), ``distributed`` (building and measuring on a Ray cluster).
"""
from __future__ import annotations

import sys
import types
from typing import Any

__all__ = ["tune"]


def tune(*args: Any, **kwargs: Any):
    """See ``tensorforge.tune.api.tune`` (imported lazily: the tuner pulls in more than compile)."""
    from .api import tune as _tune
    return _tune(*args, **kwargs)


class _CallableModule(types.ModuleType):
    """Lets ``tensorforge.tune(...)`` call ``tune`` while ``tensorforge.tune.<module>`` stays a package
    (a function bound to the same name would break ``import tensorforge.tune.tasks as t``)."""

    def __call__(self, *args: Any, **kwargs: Any):
        return tune(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
