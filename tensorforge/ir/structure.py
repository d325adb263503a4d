"""Structural equality, first difference and hashing of IR (independent of object identity).

Two ops are structurally equal when they have the same names, attributes, result types and
nested regions, and their operands are wired the same way: values are matched by where they
are defined (results and block arguments, in program order), never by identity.  Values used
but defined outside the compared op are free parameters, matched one-to-one by first use.
Locations and name hints are ignored.  Floats compare by bit pattern, so ``-0.0 != 0.0`` and
NaN equals the same NaN: equality means the text round trip was exact.

``structural_hash`` hashes exactly what ``structurally_equal`` compares; it keys CSE of
regions and the tuning database, so it must not change across runs or machines.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any

from .attributes import Dense
from .core import Operation, Value
from .types import DType, Type


def structurally_equal(a: Operation, b: Operation) -> bool:
    return structural_diff(a, b) is None


def structural_diff(a: Operation, b: Operation) -> str | None:
    """The first difference between ``a`` and ``b`` as one readable line, or None when equal."""
    return _Differ().op(a, b, _describe(a))


def structural_hash(op: Operation) -> str:
    """A stable hex digest of ``op``'s structure (see the module docstring for what counts)."""
    h = hashlib.blake2b(digest_size=16)
    numbers: dict[int, str] = {}
    _hash_op(op, h, numbers)
    return h.hexdigest()


# ---- comparison -----------------------------------------------------------------------
def _describe(op: Operation, index: int | None = None) -> str:
    sym = op.attributes.get("sym_name")
    text = f"'{op.name}'" + (f" @{sym}" if isinstance(sym, str) else "")
    if index is not None:
        text = f"op #{index} {text}"
    if op.loc is not None:
        text += f" ({op.loc})"
    return text


class _Differ:
    """Walks two op trees in step; ``forward``/``backward`` keep the value matching one-to-one."""

    def __init__(self):
        self.forward: dict[int, Value] = {}
        self.backward: dict[int, Value] = {}

    def bind(self, x: Value, y: Value) -> None:
        self.forward[id(x)] = y
        self.backward[id(y)] = x

    def op(self, a: Operation, b: Operation, path: str) -> str | None:
        if a.name != b.name:
            return f"{path}: op name '{a.name}' vs '{b.name}'"
        for what, xs, ys in (("operands", a.operands, b.operands), ("results", a.results, b.results),
                             ("regions", a.regions, b.regions)):
            if len(xs) != len(ys):
                return f"{path}: {len(xs)} {what} vs {len(ys)}"
        for i, (x, y) in enumerate(zip(a.operands, b.operands)):
            diff = self.operand(x, y)
            if diff:
                return f"{path}: operand #{i}: {diff}"
        diff = _attrs_diff(a.attributes, b.attributes)
        if diff:
            return f"{path}: {diff}"
        for i, (x, y) in enumerate(zip(a.results, b.results)):
            if x.type != y.type:
                return f"{path}: result #{i} type {x.type} vs {y.type}"
            self.bind(x, y)
        for r, (ra, rb) in enumerate(zip(a.regions, b.regions)):
            if len(ra.blocks) != len(rb.blocks):
                return f"{path}: region #{r} has {len(ra.blocks)} blocks vs {len(rb.blocks)}"
            for k, (ba, bb) in enumerate(zip(ra.blocks, rb.blocks)):
                where = f"{path} > region #{r} block #{k}"
                if len(ba.args) != len(bb.args):
                    return f"{where}: {len(ba.args)} arguments vs {len(bb.args)}"
                for i, (x, y) in enumerate(zip(ba.args, bb.args)):
                    if x.type != y.type:
                        return f"{where}: argument #{i} type {x.type} vs {y.type}"
                    self.bind(x, y)
                if len(ba) != len(bb):
                    return f"{where}: {len(ba)} ops vs {len(bb)}"
                for i, (x, y) in enumerate(zip(ba, bb)):
                    diff = self.op(x, y, f"{where} > {_describe(x, i)}")
                    if diff:
                        return diff
        return None

    def operand(self, x: Value, y: Value) -> str | None:
        mapped = self.forward.get(id(x))
        if mapped is y:
            return None
        if mapped is not None or id(y) in self.backward:
            return f"wired differently ({_value_desc(x)} vs {_value_desc(y)})"
        if x.type != y.type:       # both free (defined outside): match them by first use
            return f"free value type {x.type} vs {y.type}"
        self.bind(x, y)
        return None


def _value_desc(v: Value) -> str:
    if v.is_block_arg:
        return f"block argument #{v.index}"
    return f"result #{v.index} of '{v.owner.name}'" + (f" ({v.owner.loc})" if v.owner.loc is not None else "")


def _attrs_diff(x: dict[str, Any], y: dict[str, Any]) -> str | None:
    if x.keys() != y.keys():
        only_x = sorted(set(x) - set(y))
        only_y = sorted(set(y) - set(x))
        return f"attribute names differ (only left: {only_x}, only right: {only_y})"
    for key in x:
        if not attr_equal(x[key], y[key]):
            return f"attribute '{key}': {_pair(x[key], y[key])}"
    return None


def _pair(x: Any, y: Any) -> str:
    a, b = _short(x), _short(y)
    if a == b and isinstance(x, float):       # NaN payloads, -0.0 tricks: show the bits
        a, b = (f"{t} (bits {_float_bits(v)[::-1].hex()})" for t, v in ((a, x), (b, y)))
    return f"{a} vs {b}"


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _float_bits(v: float) -> bytes:
    return struct.pack("<d", v)


def attr_equal(x: Any, y: Any) -> bool:
    """Exact attribute equality: kinds must match (1, 1.0, True differ), floats bit for bit."""
    if type(x) is not type(y):
        return False
    if isinstance(x, float):
        return _float_bits(x) == _float_bits(y)
    if isinstance(x, tuple):
        return len(x) == len(y) and all(attr_equal(p, q) for p, q in zip(x, y))
    if isinstance(x, Dense):
        return x is y or (x.type == y.type and (x.array is y.array or x.digest == y.digest))
    return x == y


# ---- hashing --------------------------------------------------------------------------
def _hash_op(op: Operation, h, numbers: dict[int, str]) -> None:
    refs = []
    for v in op.operands:
        ref = numbers.get(id(v))
        if ref is None:       # defined outside the hashed op: a free parameter, numbered by first use
            ref = numbers[id(v)] = f"e{len(numbers)}:{v.type}"
        refs.append(ref)
    attrs = ",".join(f"{k}={attr_canon(op.attributes[k])}" for k in sorted(op.attributes))
    results = []
    for r in op.results:
        numbers[id(r)] = f"v{len(numbers)}"
        results.append(str(r.type))
    h.update(f"{op.name}({','.join(refs)}){{{attrs}}}->({','.join(results)})[{len(op.regions)}\n".encode())
    for region in op.regions:
        h.update(f"R{len(region.blocks)}\n".encode())
        for block in region.blocks:
            for a in block.args:
                numbers[id(a)] = f"v{len(numbers)}"
            h.update(f"B({','.join(str(a.type) for a in block.args)}){len(block)}\n".encode())
            for child in block:
                _hash_op(child, h, numbers)
    h.update(b"]\n")


def attr_canon(v: Any) -> str:
    """Canonical text of an attribute for hashing: kind-tagged, floats as bits, data by digest."""
    if isinstance(v, bool):
        return "b1" if v else "b0"
    if isinstance(v, int):
        return f"i{v}"
    if isinstance(v, float):
        return "f" + _float_bits(v).hex()
    if isinstance(v, str):
        return "s" + repr(v)
    if isinstance(v, tuple):
        return "(" + ",".join(attr_canon(x) for x in v) + ")"
    if isinstance(v, DType):
        return "d" + v.value
    if isinstance(v, Dense):
        return f"D{v.type}:{v.digest}"
    if isinstance(v, Type):
        return f"T{type(v).__name__}:{v}"
    return f"?{type(v).__name__}:{v!r}"


__all__ = ["structurally_equal", "structural_diff", "structural_hash", "attr_equal", "attr_canon"]
