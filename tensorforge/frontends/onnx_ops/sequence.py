"""ONNX sequences and optionals, resolved at import time (design: ``docs/control_flow.md``).

A sequence whose length the import knows is a Python list of graph values (``SeqValue``): every
sequence op is list manipulation at import (``SequenceConstruct`` builds the list,
``SequenceAt`` with a constant position picks an element, ``SplitToSequence`` is a
``graph.split``, ``ConcatFromSequence`` a ``graph.concat``, ``SequenceLength`` a constant), so
sequences cost nothing at run time and every element keeps its own static type.  An optional is
``OptValue`` (a value or None), again decided at import.  A position, split or condition that is
computed at run time is a ``NonConstantInputError`` (the model then specialises on the input that
feeds it) or unsupported.

Sequence/optional *model inputs and outputs* are flattened at the model boundary
(``frontends/onnx_structured.py``): an input sequence of n tensors becomes n tensor inputs (one
compiled specialisation per length and element shapes), an output sequence n tensor outputs that
the wrapper regroups into a list.
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ...ir.core import Value
from ...ir.types import DType
from .context import ImportContext, OnnxNode
from .dtypes import to_dtype
from .registry import handles


class SeqValue:
    """A sequence known at import: its element values (graph values) and element type."""

    __slots__ = ("items", "dtype", "name_hint")

    def __init__(self, items, dtype: DType | None = None):
        self.items = list(items)
        self.dtype = dtype if dtype is not None or not self.items else self.items[0].type.dtype
        self.name_hint = None

    def __repr__(self):
        return f"<SeqValue of {len(self.items)}>"


class OptValue:
    """An optional known at import: ``value`` is a ``Value``, a ``SeqValue`` or None (empty)."""

    __slots__ = ("value", "name_hint")

    def __init__(self, value):
        self.value = value
        self.name_hint = None

    def __repr__(self):
        return f"<OptValue {self.value!r}>"


def is_structured(v: Any) -> bool:
    return isinstance(v, (SeqValue, OptValue))


# ---- outputs at the model boundary --------------------------------------------------------
def flatten(v: Any) -> tuple[list[Value], Any]:
    """The tensors of an output and its structure: ``"t"`` (one tensor), ``["s", [subs...]]``
    (a sequence), ``["o", sub | None]`` (an optional)."""
    if isinstance(v, SeqValue):
        values, subs = [], []
        for item in v.items:
            vs, s = flatten(item)
            values += vs
            subs.append(s)
        return values, ["s", subs]
    if isinstance(v, OptValue):
        if v.value is None:
            return [], ["o", None]
        vs, s = flatten(v.value)
        return vs, ["o", s]
    return [v], "t"


def flatten_outputs(func, outputs: list) -> list[Value]:
    """The function's returned tensors; when an output is a sequence or optional, the structure
    of every output is recorded as the function attribute ``tf.onnx_outputs`` (JSON)."""
    if not any(is_structured(v) for v in outputs):
        return outputs
    values, structure = [], []
    for v in outputs:
        vs, s = flatten(v)
        values += vs
        structure.append(s)
    func.set_attr("tf.onnx_outputs", json.dumps(structure))
    return values


def regroup(structure: list, arrays: list) -> list:
    """The inverse of ``flatten`` over a run's output arrays (lists for sequences, None for an
    empty optional)."""
    it = iter(arrays)
    return [rebuild(s, it, list, lambda v: v) for s in structure]


def rebuild(structure, values, make_seq, make_opt):
    """One structure (``flatten``'s) rebuilt from the iterator ``values``: ``make_seq`` gets the
    list of a sequence's elements, ``make_opt`` an optional's element or None."""
    if structure == "t":
        return next(values)
    kind, sub = structure
    if kind == "s":
        return make_seq([rebuild(x, values, make_seq, make_opt) for x in sub])
    return make_opt(None if sub is None else rebuild(sub, values, make_seq, make_opt))


# ---- helpers ---------------------------------------------------------------------------------
def _seq(node: OnnxNode, i: int) -> SeqValue:
    v = node.required(i, "sequence")
    if isinstance(v, OptValue):
        v = v.value
    if not isinstance(v, SeqValue):
        raise node.unsupported(f"input #{i} must be a sequence")
    return v


def _position(ctx: ImportContext, node: OnnxNode, i: int, n: int, default: int, insert: bool = False) -> int:
    v = node.input(i)
    if v is None:
        return default
    pos = int(ctx.const_scalar(v, "the sequence position"))
    hi = n if insert else n - 1
    if not -n <= pos <= hi:
        raise node.unsupported(f"position {pos} is out of range for a sequence of {n}")
    return pos + n if pos < 0 else pos


# ---- sequence ops ---------------------------------------------------------------------------
@handles("SequenceConstruct")
def sequence_construct(ctx: ImportContext, node: OnnxNode):
    items = [x for x in node.inputs if x is not None]
    if any(not isinstance(x, Value) for x in items):
        raise node.unsupported("sequence elements must be tensors")
    if len({x.type.dtype for x in items}) > 1:
        raise node.unsupported("sequence elements of different element types")
    return SeqValue(items)


@handles("SequenceEmpty")
def sequence_empty(ctx: ImportContext, node: OnnxNode):
    code = node.attr("dtype", 1)
    dtype = to_dtype(code)
    if dtype is None:
        raise node.unsupported(f"element type {code} is not supported")
    return SeqValue([], dtype)


@handles("SequenceAt")
def sequence_at(ctx: ImportContext, node: OnnxNode):
    seq = _seq(node, 0)
    pos = _position(ctx, node, 1, len(seq.items), 0)
    return seq.items[pos]


@handles("SequenceInsert")
def sequence_insert(ctx: ImportContext, node: OnnxNode):
    seq = _seq(node, 0)
    t = node.required(1, "tensor")
    pos = _position(ctx, node, 2, len(seq.items), len(seq.items), insert=True)
    items = list(seq.items)
    items.insert(pos, t)
    return SeqValue(items, seq.dtype)


@handles("SequenceErase")
def sequence_erase(ctx: ImportContext, node: OnnxNode):
    seq = _seq(node, 0)
    if not seq.items:
        raise node.unsupported("erasing from an empty sequence")
    pos = _position(ctx, node, 1, len(seq.items), len(seq.items) - 1)
    items = list(seq.items)
    del items[pos]
    return SeqValue(items, seq.dtype)


@handles("SequenceLength")
def sequence_length(ctx: ImportContext, node: OnnxNode):
    return ctx.const(np.asarray(len(_seq(node, 0).items), np.int64))


@handles("SplitToSequence")
def split_to_sequence(ctx: ImportContext, node: OnnxNode):
    x = node.required(0)
    rank = ctx.rank(x)
    axis = node.attr("axis", 0)
    if not -rank <= axis < rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    keepdims = node.attr("keepdims", 1)
    dim = ctx.shape(x)[axis]
    if not isinstance(dim, int):
        raise ctx.unbound("SplitToSequence needs a static size on the split axis", [dim])
    split = node.input(1)
    if split is None:
        sizes = [1] * dim
    else:
        arr = np.asarray(ctx.require_const(split, "the split sizes"))
        if arr.ndim == 0:
            chunk = int(arr)
            if chunk <= 0:
                raise node.unsupported(f"split size {chunk} must be positive")
            sizes = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
        else:
            sizes = [int(s) for s in arr.reshape(-1)]
            if sum(sizes) != dim or any(s < 0 for s in sizes):
                raise node.unsupported(f"split sizes {sizes} do not add up to {dim}")
        keepdims = 1                      # ONNX: keepdims is ignored when 'split' is given
    if len(sizes) == 1:
        parts = [ctx.op("identity", x)]
    elif not sizes:
        parts = []
    else:
        out = ctx.op("split", x, axis=axis, sizes=tuple(sizes))
        parts = list(out) if isinstance(out, tuple) else [out]
    if not keepdims:
        parts = [ctx.op("squeeze", p, axes=(axis,)) for p in parts]
    return SeqValue(parts, ctx.dtype(x))


@handles("ConcatFromSequence")
def concat_from_sequence(ctx: ImportContext, node: OnnxNode):
    seq = _seq(node, 0)
    if not seq.items:
        raise node.unsupported("concatenating an empty sequence")
    new_axis = node.attr("new_axis", 0)
    axis = node.attr("axis")
    rank = ctx.rank(seq.items[0]) + (1 if new_axis else 0)
    if not -rank <= axis < rank:
        raise node.unsupported(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    items = [ctx.op("unsqueeze", x, axes=(axis,)) for x in seq.items] if new_axis else seq.items
    if len(items) == 1:
        return ctx.op("identity", items[0])
    return ctx.op("concat", items, axis=axis)


# ---- optionals ------------------------------------------------------------------------------
@handles("Optional")
def optional(ctx: ImportContext, node: OnnxNode):
    node.ignore("type")
    return OptValue(node.input(0))


@handles("OptionalHasElement")
def optional_has_element(ctx: ImportContext, node: OnnxNode):
    v = node.input(0)
    present = v is not None and not (isinstance(v, OptValue) and v.value is None)
    return ctx.const(np.asarray(present))


@handles("OptionalGetElement")
def optional_get_element(ctx: ImportContext, node: OnnxNode):
    v = node.required(0, "optional")
    if isinstance(v, OptValue):
        if v.value is None:
            raise node.unsupported("the optional is empty (OptionalGetElement of an empty optional fails)")
        return v.value
    return v
