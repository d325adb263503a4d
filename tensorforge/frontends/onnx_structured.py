"""ONNX models with sequence- or optional-typed inputs and outputs (design: ``docs/control_flow.md``).

Inside a model, sequences and optionals are resolved at import (``onnx_ops/sequence.py``); at
the model boundary they are flattened into tensors:

- **inputs**: a call passes a list of arrays for a sequence input and an array, a list or None
  for an optional one.  The model is rewritten per *structure* of the call (each sequence's
  length and element shapes/types, each optional's presence): a sequence input ``x`` of n
  elements becomes tensor inputs ``x.0`` ... ``x.{n-1}`` feeding a ``SequenceConstruct`` that
  defines ``x``; an optional becomes ``Optional(...)`` of its content, or an empty
  ``Optional``.  The rewritten model compiles as any ONNX model (``tensorforge.compile``; shape
  operands computed from inputs still specialise on their values), one compile per distinct
  structure (an LRU cache of ``max_specializations``);
- **outputs**: the import records the structure of its outputs (``tf.onnx_outputs`` on
  ``main``) and the call regroups the flat results: a list per sequence, None for an empty
  optional.

A model without such inputs and outputs never comes here.
"""
from __future__ import annotations

import collections
import json
import threading
from typing import Any, Sequence

import numpy as np

from .. import api
from ..errors import TensorforgeError

__all__ = ["StructuredModel", "compile_structured", "has_structured_io"]


def _data_inputs(proto):
    inits = {t.name for t in proto.graph.initializer}
    return [vi for vi in proto.graph.input if vi.name not in inits]


def has_structured_io(proto) -> bool:
    """Whether a model input or output is a sequence or an optional."""
    vis = list(_data_inputs(proto)) + list(proto.graph.output)
    return any(vi.type.WhichOneof("value") not in ("tensor_type", None) for vi in vis)


def _signature(x: Any, kind) -> Any:
    """The part of a call's input that decides the rewritten model (hashable)."""
    if kind.WhichOneof("value") == "sequence_type":
        if not isinstance(x, (list, tuple)):
            raise TensorforgeError(f"a sequence input takes a list of arrays, got {type(x).__name__}")
        return ("s", tuple(_signature(e, kind.sequence_type.elem_type) for e in x))
    if kind.WhichOneof("value") == "optional_type":
        return ("o", None if x is None else _signature(x, kind.optional_type.elem_type))
    a = np.asarray(x)
    return ("t", a.dtype.str, a.shape)


def _flat(x: Any, kind) -> list[np.ndarray]:
    which = kind.WhichOneof("value")
    if which == "sequence_type":
        return [a for e in x for a in _flat(e, kind.sequence_type.elem_type)]
    if which == "optional_type":
        return [] if x is None else _flat(x, kind.optional_type.elem_type)
    return [np.asarray(x)]


def rewrite(proto, inputs: Sequence[Any]):
    """A copy of ``proto`` whose sequence/optional inputs are tensor inputs for ``inputs``."""
    import onnx
    from onnx import helper

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    g = model.graph
    data = _data_inputs(proto)
    if len(inputs) != len(data):
        raise TensorforgeError(f"the model takes {len(data)} input(s) ({', '.join(vi.name for vi in data)}), "
                               f"got {len(inputs)}")
    new_inputs, prologue = [], []

    def expand(name: str, x: Any, kind) -> None:
        which = kind.WhichOneof("value")
        if which == "sequence_type":
            elem = kind.sequence_type.elem_type
            names = []
            for i, e in enumerate(x):
                names.append(f"{name}.{i}")
                expand(names[-1], e, elem)
            if names:
                prologue.append(helper.make_node("SequenceConstruct", names, [name]))
            else:
                code = elem.tensor_type.elem_type if elem.HasField("tensor_type") else 1
                prologue.append(helper.make_node("SequenceEmpty", [], [name], dtype=code))
        elif which == "optional_type":
            if x is None:
                prologue.append(helper.make_node("Optional", [], [name], type=kind.optional_type.elem_type))
            else:
                expand(name + ".v", x, kind.optional_type.elem_type)
                prologue.append(helper.make_node("Optional", [name + ".v"], [name]))
        else:
            a = np.asarray(x)
            code = kind.tensor_type.elem_type if kind.HasField("tensor_type") and kind.tensor_type.elem_type \
                else helper.np_dtype_to_tensor_dtype(a.dtype)
            new_inputs.append(helper.make_tensor_value_info(name, code, a.shape))

    for vi, x in zip(data, inputs):
        which = vi.type.WhichOneof("value")
        if which in ("sequence_type", "optional_type"):
            expand(vi.name, x, vi.type)
        else:
            new_inputs.append(vi)
    inits = [vi for vi in proto.graph.input if vi not in data]
    del g.input[:]
    g.input.extend(new_inputs + inits)
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(prologue + nodes)
    return model


class StructuredModel(api.CompiledModel):
    """An ONNX model with sequence/optional inputs or outputs: lists and None in and out.

    ``specialization(*inputs)`` is the compiled model (tensor inputs only, flat outputs) for the
    structure of ``inputs``."""

    def __init__(self, proto, target: str = "cpu", max_specializations: int | None = None, **compile_options: Any):
        super().__init__(None, target=target)
        self.proto = proto
        self._data = _data_inputs(proto)
        self._options = compile_options
        if any(vi.type.WhichOneof("value") != "tensor_type" for vi in self._data):
            self._options.pop("example_inputs", None)     # they hold lists; each structure compiles on its call
        self._max = 8 if max_specializations is None else max(int(max_specializations), 1)
        self._cache: collections.OrderedDict[tuple, api.CompiledModel] = collections.OrderedDict()
        self._lock = threading.RLock()
        if not any(vi.type.WhichOneof("value") != "tensor_type" for vi in self._data):
            self._last = self._compile([None] * len(self._data), ())   # tensors only: compile now
            self.module, self.func = self._last.module, self._last.func

    def _compile(self, inputs: Sequence[Any], key: tuple) -> api.CompiledModel:
        structured = any(vi.type.WhichOneof("value") != "tensor_type" for vi in self._data)
        model = rewrite(self.proto, inputs) if structured else self.proto
        cm = api.compile(model, target=self.target, **self._options)
        self._cache[key] = cm
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        return cm

    def specialization(self, *inputs) -> api.CompiledModel:
        if len(inputs) != len(self._data):
            raise TensorforgeError(f"the model takes {len(self._data)} input(s) "
                                   f"({', '.join(vi.name for vi in self._data)}), got {len(inputs)}")
        key = tuple(_signature(x, vi.type) if vi.type.WhichOneof("value") != "tensor_type" else None
                    for x, vi in zip(inputs, self._data))
        with self._lock:
            hit = self._cache.get(key)
            if hit is None:
                hit = self._compile(inputs, key)
            else:
                self._cache.move_to_end(key)
            return hit

    def _flat_inputs(self, inputs) -> list:
        out = []
        for x, vi in zip(inputs, self._data):
            if vi.type.WhichOneof("value") == "tensor_type":
                out.append(x)
            else:
                out += _flat(x, vi.type)
        return out

    @staticmethod
    def _structure(cm: api.CompiledModel) -> list | None:
        inner = getattr(cm, "_last", None) or cm
        func = inner.func
        text = func.attr("tf.onnx_outputs") if func is not None else None
        return json.loads(text) if text else None

    def run_numpy(self, inputs: Sequence[Any]) -> list:
        cm = self.specialization(*inputs)
        outs = cm.run_numpy(self._flat_inputs(inputs))
        structure = self._structure(cm)
        if structure is None:
            return outs
        from .onnx_ops.sequence import regroup
        return regroup(structure, list(outs))

    def run(self, *inputs, out: Sequence | None = None) -> list:
        if out is not None:
            raise TensorforgeError("out= is not supported for models with sequence/optional inputs or outputs")
        return self.run_numpy(inputs)

    def __call__(self, *inputs):
        outs = self.run_numpy(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def input_specs(self) -> list:
        raise TensorforgeError("a model with sequence/optional inputs has no fixed tensor signature; "
                               "see cm.specialization(*inputs).input_specs")

    @property
    def output_specs(self) -> list:
        raise TensorforgeError("a model with sequence/optional outputs has no fixed tensor signature; "
                               "see cm.specialization(*inputs).output_specs")

    def save(self, path, include_graph: bool = True) -> None:
        raise TensorforgeError("cannot save a model with sequence/optional inputs or outputs as one .tfm: "
                               "save cm.specialization(*inputs)")


def compile_structured(model: Any, **options: Any) -> StructuredModel | None:
    """A ``StructuredModel`` for an ONNX model with sequence/optional inputs or outputs, else None."""
    from .onnx import load_model
    proto = load_model(model)
    if not has_structured_io(proto):
        return None
    return StructuredModel(proto, **options)
