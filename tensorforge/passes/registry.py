"""Passes by name, for textual pipelines (``PassManager.parse("fold,dce,cse")``) and the CLI.

Pass modules register themselves with ``@register_pass`` when imported.  So that looking a
pass up never depends on import order, each built-in name is mapped to the module that
defines it and that module is imported on first use; a new pass module adds its names with
``declare_pass(name, module)`` (or is simply imported before the lookup).
"""
from __future__ import annotations

import importlib
from typing import Any

from ..errors import PassError
from ..ir.pass_manager import Pass

_PASSES: dict[str, type[Pass]] = {}
_LAZY: dict[str, str] = {
    "simplify": "tensorforge.passes.graph.simplify",
    "fold": "tensorforge.passes.graph.simplify",
    "dce": "tensorforge.passes.graph.dce",
    "cse": "tensorforge.passes.graph.cse",
    "simplify-extra": "tensorforge.passes.graph.rules_extra", "shape-prop": "tensorforge.passes.graph.shape_prop",
    "fold-inference": "tensorforge.passes.graph.fold_inference", "layout": "tensorforge.passes.graph.layout",
    "reorder": "tensorforge.passes.graph.reorder", "const-fold": "tensorforge.passes.graph.const_fold",
    "fold-control-flow": "tensorforge.passes.graph.fold_control_flow",
    "trim-window": "tensorforge.passes.graph.trim_window",
    "int8-contractions": "tensorforge.passes.graph.int8_contractions",
    "qdq-contractions": "tensorforge.passes.graph.qdq",
}
# Lowering to kernels and the fusion passes.
_LAZY.update({"lower-structured": "tensorforge.passes.lower.graph_to_kernels",
              **{n: "tensorforge.passes.fusion.passes"
                 for n in ("fuse", "fuse-vertical", "fuse-horizontal", "fuse-reuse", "fuse-category")}})


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: makes a ``Pass`` subclass known under its ``name``."""
    if not isinstance(cls, type) or not issubclass(cls, Pass) or not cls.name:
        raise PassError(f"register_pass needs a Pass subclass with a name, got {cls!r}")
    other = _PASSES.get(cls.name)
    if other is not None and (other.__module__, other.__qualname__) != (cls.__module__, cls.__qualname__):
        raise PassError(f"pass '{cls.name}' is registered twice ({other.__module__} and {cls.__module__})")
    _PASSES[cls.name] = cls
    return cls


def declare_pass(name: str, module: str) -> None:
    """Says that importing ``module`` registers the pass ``name`` (imported on first lookup)."""
    _LAZY[name] = module


def pass_class(name: str) -> type[Pass]:
    cls = _PASSES.get(name)
    if cls is None and name in _LAZY:
        importlib.import_module(_LAZY[name])
        cls = _PASSES.get(name)
    if cls is None:
        raise PassError(f"unknown pass '{name}'; known passes: {', '.join(known_passes())}")
    return cls


def get_pass(name: str, **options: Any) -> Pass:
    """A new instance of the pass ``name`` configured with ``options``."""
    return pass_class(name)(**options)


def known_passes() -> list[str]:
    """Every pass name, after importing the modules that declare them."""
    for module in sorted(set(_LAZY.values())):
        importlib.import_module(module)
    return sorted(_PASSES)


__all__ = ["declare_pass", "get_pass", "known_passes", "pass_class", "register_pass"]
