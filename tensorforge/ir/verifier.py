"""Checks a module against the op definitions; each failure names the op, where it is, the rule."""
from __future__ import annotations

from ..errors import IRError, TensorforgeError, VerificationError
from .core import Block, Operation, Value
from .opdef import TERMINATOR


def _where(op: Operation) -> str:
    return f"{op.loc}: " if op.loc is not None else ""


def _fail(op: Operation, rule: str) -> None:
    raise VerificationError(f"{_where(op)}'{op.name}' {rule}")


def verify_op(op: Operation, allow_unregistered: bool = False) -> None:
    """Checks one op (not its nested regions)."""
    d = op.opdef
    if d is None:
        if not allow_unregistered:
            _fail(op, "is not a registered op")
        return
    lo, hi = d.operand_range()
    n = len(op.operands)
    if n < lo or (hi is not None and n > hi):
        _fail(op, f"has {n} operands; its definition ({', '.join(d.operands)}) takes "
                  f"{lo}{'' if hi == lo else '..' + ('' if hi is None else str(hi))}")
    rlo, rhi = d.result_range()
    if len(op.results) < rlo or (rhi is not None and len(op.results) > rhi):
        _fail(op, f"has {len(op.results)} results; its definition declares {', '.join(d.results) or 'none'}")
    try:
        normal = d.normalize_attrs(op.attributes)
    except IRError as e:
        _fail(op, f"attribute rule: {e}")
    for key, value in normal.items():
        if key not in op.attributes:
            _fail(op, f"is missing attribute '{key}' (default {value!r} was not materialised)")
    if d.operands or op.results:
        try:
            inferred = d.infer([v.type for v in op.operands], op.attributes)
        except IRError as e:
            if "cannot infer" not in str(e):
                _fail(op, f"operand types rejected: {e}")
            inferred = None
        except TensorforgeError as e:
            _fail(op, f"operand types rejected: {e}")
        if inferred is not None:
            got = [r.type for r in op.results]
            if list(inferred) != got:
                for i, (g, w) in enumerate(zip(got, inferred)):
                    if g != w:
                        _fail(op, f"result #{i} has type {g} but its operands give {w}")
                _fail(op, f"has results {list(map(str, got))}, expected {list(map(str, inferred))}")
    try:
        d.verify(op)
    except VerificationError as e:
        _fail(op, str(e))
    except TensorforgeError as e:
        _fail(op, str(e))


def verify(root: Operation, allow_unregistered: bool = False) -> None:
    """Verifies every op under ``root`` and SSA dominance (operands defined before use).

    ``root``'s own operands are taken as given, so a detached op can be checked on its own.
    """
    _verify_region_tree(root, {id(v) for v in root.operands}, allow_unregistered)


def _verify_region_tree(op: Operation, visible: set[int], allow_unregistered: bool) -> None:
    verify_op(op, allow_unregistered)
    for i, v in enumerate(op.operands):
        if id(v) not in visible:
            what = "a block argument of another region" if v.is_block_arg else \
                (f"'{v.op.name}'" if v.op is not None else "an unknown value")
            _fail(op, f"uses operand #{i} ({v.type}) from {what} that does not dominate it "
                      f"(defined later, erased, or in another function)")
    for region in op.regions:
        for block in region.blocks:
            inner = set(visible)
            inner.update(id(a) for a in block.args)
            for child in block:
                _verify_region_tree(child, inner, allow_unregistered)
                inner.update(id(r) for r in child.results)
                if child.opdef is not None and TERMINATOR in child.opdef.traits and child is not block.last:
                    _fail(child, "is a terminator but is not the last op of its block")
