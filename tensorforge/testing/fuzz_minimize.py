"""Shrink a failing random case while its failure persists.

``minimize(case, fails)`` tries, greedily and until nothing changes (or the budget of predicate
calls runs out), smaller variants of ``case`` and keeps each one for which ``fails(variant)``
is still true:

1. keep a single output, then try an earlier tensor as the output (drops the nodes after it);
2. cut: make a node's input a graph input holding the value onnxruntime computed there, so
   everything upstream drops out;
3. bypass: drop a node by letting its consumers read one of its inputs of the same type;
4. shrink shapes: slice a graph input along one axis (one element, or either half);
5. reduce special values: replace every special value of one kind by an ordinary value, then
   halve the set of positions holding special values;
6. round ordinary input values to two decimals (readable regression tests).

Every variant must still be a valid graph (ONNX shape inference and onnxruntime accept it);
``fails`` decides what "the same failure" means (e.g. same target and kind of mismatch), so the
minimiser itself is independent of tensorforge and can be tested with a synthetic predicate.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from .fuzz_graphs import Case, Node, _infer, prune
from .fuzz_values import SPECIALS, special_mask


class _Budget(Exception):
    pass


def retype(case: Case) -> Case:
    """``case`` with every tensor type re-inferred (after its inputs changed shape); raises
    ValueError when ONNX shape inference refuses the graph."""
    from .fuzz_graphs import Reject
    types = {k: (str(v.dtype), tuple(v.shape)) for k, v in case.inputs.items()}
    types.update({k: (str(v.dtype), tuple(v.shape)) for k, v in case.inits.items()})
    for n in case.nodes:
        try:
            got = _infer(n, types, case.inits, case.opset)
        except Reject as exc:
            raise ValueError(str(exc)) from None
        for o in n.outputs:
            if o not in got or any(not isinstance(d, int) or d < 0 for d in got[o][1]):
                raise ValueError(f"{n.op}: no type for {o}")
        types.update(got)
    case.types = types
    return case


def minimize(case: Case, fails: Callable[[Case], bool], max_calls: int = 120, max_seconds: float = 300.0,
             valid: Callable[[Case], bool] | None = None, log: Callable[[str], None] | None = None) -> Case:
    """The smallest variant of ``case`` found for which ``fails`` holds (``case`` itself must fail)."""
    from .fuzz_check import InvalidCase, reference
    start = time.monotonic()
    calls = [0]

    def default_valid(c: Case) -> bool:
        try:
            reference(c)
            return True
        except InvalidCase:
            return False

    is_valid = valid or default_valid

    def attempt(c: Case | None) -> bool:
        if c is None or not c.outputs or not c.nodes:
            return False
        if calls[0] >= max_calls or time.monotonic() - start > max_seconds:
            raise _Budget
        try:
            c = retype(prune(c))
        except ValueError:
            return False
        if not is_valid(c):
            return False
        calls[0] += 1
        ok = bool(fails(c))
        if ok and log:
            log(f"  shrunk: {len(c.nodes)} nodes, {sum(v.size for v in c.inputs.values())} input elements")
        return ok

    best = case.copy()
    try:
        progress = True
        while progress:
            progress = False
            for step in (_one_output, _earlier_output, _cut, _bypass, _shrink_shapes, _drop_specials, _round_values):
                for cand in step(best):
                    if attempt(cand):
                        best = retype(prune(cand))
                        progress = True
                        break       # restart this step's enumeration on the smaller case
    except _Budget:
        pass
    return best


# ---- candidate generators (each yields variants, smallest first) -----------------------------
def _one_output(case: Case):
    if len(case.outputs) > 1:
        for o in case.outputs:
            c = case.copy()
            c.outputs = [o]
            yield c


def _earlier_output(case: Case):
    """Make a tensor computed earlier the only output (the nodes after it drop out)."""
    if len(case.outputs) != 1:
        return
    for n in case.nodes:
        for o in n.outputs:
            if o not in case.outputs:
                c = case.copy()
                c.outputs = [o]
                yield c


def _cut(case: Case):
    """Replace a produced tensor read by some node with a graph input holding its value."""
    produced = {o for n in case.nodes for o in n.outputs}
    ref = None
    for n in reversed(case.nodes):
        for t in n.inputs:
            if t not in produced:
                continue
            if ref is None:
                from .fuzz_check import InvalidCase, reference
                try:
                    ref = reference(case).outputs
                except InvalidCase:
                    return
            if t not in ref:
                continue
            c = case.copy()
            c.inputs[t] = np.asarray(ref[t]).copy()
            c.nodes = [m for m in c.nodes if t not in m.outputs or len(m.outputs) > 1]
            for m in c.nodes:
                if t in m.outputs:           # a multi-output node: rename the cut result away
                    m.outputs = [o if o != t else o + "_cut" for o in m.outputs]
            yield c


def _bypass(case: Case):
    for idx in range(len(case.nodes) - 1, -1, -1):
        n = case.nodes[idx]
        if len(n.outputs) != 1:
            continue
        out = n.outputs[0]
        for i in dict.fromkeys(n.inputs):
            if not i or case.types.get(i) != case.types.get(out):
                continue
            c = case.copy()
            del c.nodes[idx]
            for m in c.nodes:
                m.inputs = [i if x == out else x for x in m.inputs]
            c.outputs = list(dict.fromkeys(i if o == out else o for o in c.outputs))
            if i in c.inits and i in c.outputs:
                continue
            yield c


def _shrink_shapes(case: Case):
    """Slice one input along one axis: one element (each position), or either half."""
    for name, v in case.inputs.items():
        for axis, d in enumerate(v.shape):
            if d < 2:
                continue
            picks = [[j] for j in range(min(d, 8))]
            if d > 2:
                picks += [list(range(d // 2)), list(range(d // 2, d))]
            for idx in picks:
                c = case.copy()
                c.inputs[name] = np.take(v, np.array(idx), axis=axis).copy()
                yield c


def _drop_specials(case: Case):
    rng = np.random.default_rng(0)
    present = [k for k in SPECIALS if any(special_mask(v, [k]).any() for v in case.inputs.values() if v.dtype.kind == "f")]
    for kind in present:
        c = case.copy()
        for name, v in c.inputs.items():
            if v.dtype.kind == "f":
                m = special_mask(v, [kind])
                v[m] = np.round(rng.standard_normal(int(m.sum())), 2).astype(v.dtype)
        yield c
    # then halves of the remaining special positions
    for name, v in case.inputs.items():
        if v.dtype.kind != "f":
            continue
        pos = np.argwhere(special_mask(v))
        if len(pos) < 2:
            continue
        for half in (pos[: len(pos) // 2], pos[len(pos) // 2:]):
            c = case.copy()
            x = c.inputs[name]
            for p in half:
                x[tuple(p)] = np.float32(0.5)
            yield c


def _round_values(case: Case):
    for name, v in case.inputs.items():
        if v.dtype.kind != "f" or v.size == 0:
            continue
        keep = special_mask(v) | ~np.isfinite(v)
        with np.errstate(all="ignore"):
            r = np.where(keep, v, np.round(v.astype(np.float64), 2)).astype(v.dtype)
        if np.array_equal(r, v, equal_nan=True):
            continue
        c = case.copy()
        c.inputs[name] = r
        yield c


__all__ = ["minimize", "retype", "Node"]
