"""Merging kernels at the structured level, and keeping the function body in dependence order.

``merge_kernels`` builds one kernel out of several: the union of their external inputs becomes
its block arguments, their computes are copied in order, and a member reading another member's
result reads that compute directly.  Every member result still used outside the group (by
another kernel or the function's return) stays a result of the merged kernel: that is how a
value needed both inside and outside a group comes out as an extra output.

``split_outputs`` is the inverse for a multi-output kernel whose results go different ways:
one kernel per result, each holding only the computes that result needs.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Sequence

from ...ir.builder import make_op
from ...ir.core import Block, Operation, Region, Value
from ...ir.opdef import TERMINATOR, FusionKind
from ..lower.graph_to_kernels import FUSION_ATTR
from .kinds import KERNEL, combined_kind, kind_name

MAX_NAME = 48


def kernel_body(kernel: Operation) -> Block:
    return kernel.regions[0].blocks[0]


def merged_name(kernels: Sequence[Operation]) -> str:
    """``conv_batch_norm_relu``: member names in order, repeats dropped, cut to a sane length."""
    parts: list[str] = []
    for k in kernels:
        for p in str(k.attributes.get("sym_name", "kernel")).split("_"):
            if not parts or parts[-1] != p:
                parts.append(p)
    name = "_".join(parts)
    return name if len(name) <= MAX_NAME else name[:MAX_NAME].rstrip("_")


@dataclass
class Merged:
    """A merged kernel before it is committed: ``visible`` pairs each member result still used
    outside with the index of the result replacing it; ``inner`` maps id(member result) to the
    value computing it inside ``kernel``."""

    kernel: Operation
    visible: list[tuple[Value, int]]
    inner: dict[int, Value]


def build_merged(kernels: Sequence[Operation], name: str | None = None,
                 kind: FusionKind | None = None) -> Merged:
    """A new, detached kernel computing every member of ``kernels`` (given in program order).

    The kernel holds uses of its operands: attach it with ``commit_merge`` or release it with
    ``discard``.
    """
    members = {id(k) for k in kernels}
    block = Block()
    inputs: list[Value] = []
    arg_of: dict[int, Value] = {}
    inner: dict[int, Value] = {}            # id(member result) -> value inside the new block

    def external(v: Value) -> Value:
        a = arg_of.get(id(v))
        if a is None:
            a = block.add_arg(v.type)
            arg_of[id(v)] = a
            inputs.append(v)
        return a

    for k in kernels:
        body = kernel_body(k)
        mapping: dict[Value, Value] = {}
        for a, v in zip(body.args, k.operands):
            mapping[a] = inner[id(v)] if id(v) in inner else external(v)
        for op in body:
            if op.name == "structured.return":
                for r, v in zip(k.results, op.operands):
                    inner[id(r)] = mapping.get(v, v)
                break
            block.append(op.clone(mapping))
    outputs: list[Value] = []
    out_index: dict[int, int] = {}
    visible: list[tuple[Value, int]] = []
    for k in kernels:
        for r in k.results:
            if not any(id(user) not in members for user, _ in r.uses):
                continue
            v = inner[id(r)]
            j = out_index.get(id(v))
            if j is None:
                j = out_index[id(v)] = len(outputs)
                outputs.append(v)
            visible.append((r, j))
    block.append(make_op("structured.return", outputs))
    attrs = {"sym_name": name or merged_name(kernels),
             FUSION_ATTR: kind_name(kind if kind is not None else combined_kind(kernels))}
    kernel = make_op(KERNEL, inputs, attrs, [v.type for v in outputs], regions=[Region([block])])
    return Merged(kernel, visible, inner)


def discard(kernel: Operation) -> None:
    """Releases a detached kernel built by ``build_merged`` (drops its operand uses)."""
    kernel.drop_all_references()


def commit_merge(kernels: Sequence[Operation], merged: Merged) -> Operation:
    """Puts the merged kernel in place of ``kernels``: inserted at the last member, outside uses
    moved to its results, the members erased, and the block re-sorted if that broke an order."""
    last = kernels[-1]
    block = last.parent
    block.insert_before(merged.kernel, last)
    for old, j in merged.visible:
        old.replace_all_uses_with(merged.kernel.results[j])
    for k in reversed(kernels):
        k.erase()
    if not in_order(block):
        toposort(block)
    return merged.kernel


def in_order(block: Block) -> bool:
    """Whether every operand of every op is defined above it."""
    seen: set[int] = set()
    for op in block:
        for v in op.operands:
            if v.op is not None and v.op.parent is block and id(v.op) not in seen:
                return False
        seen.add(id(op))
    return True


def toposort(block: Block) -> None:
    """Reorders ``block`` into a dependence order that keeps the current order where it can
    (Kahn's algorithm, ready ops taken by their current position); the terminator stays last."""
    ops = list(block)
    term = ops.pop() if ops and ops[-1].has_trait(TERMINATOR) else None
    pos = {id(op): i for i, op in enumerate(ops)}
    waiting = {id(op): 0 for op in ops}
    users: dict[int, list[Operation]] = {id(op): [] for op in ops}
    for op in ops:
        for v in {id(v): v for v in op.operands}.values():
            p = v.op
            if p is not None and id(p) in pos:
                waiting[id(op)] += 1
                users[id(p)].append(op)
    ready = [(pos[id(op)], op) for op in ops if waiting[id(op)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, op = heapq.heappop(ready)
        order.append(op)
        for u in users[id(op)]:
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(ready, (pos[id(u)], u))
    if len(order) != len(ops):
        from ...errors import PassError
        raise PassError("fusion made a cycle between kernels (a bug in the legality check)")
    for op in ops:
        op.detach()
    anchor = term
    for op in order:
        if anchor is not None:
            block.insert_before(op, anchor)
        else:
            block.append(op)


def prune_inputs(kernel: Operation) -> int:
    """Drops the kernel's unused inputs (and constants nothing else uses); returns how many."""
    body = kernel_body(kernel)
    keep = [i for i, a in enumerate(body.args) if a.uses]
    if len(keep) == len(body.args):
        return 0
    dropped = [kernel.operands[i] for i in range(len(body.args)) if i not in set(keep)]
    body.args = [body.args[i] for i in keep]
    for j, a in enumerate(body.args):
        a.index = j
    kernel.set_operands([kernel.operands[i] for i in keep])
    for v in dropped:
        if v.op is not None and v.op.name == "graph.constant" and not v.uses:
            v.op.erase()
    return len(dropped)


def needed_computes(kernel: Operation, roots: Sequence[Value]) -> set[int]:
    """ids of the computes that ``roots`` (values of the kernel body) read, transitively."""
    body = kernel_body(kernel)
    need: set[int] = set()
    stack = [v.op for v in roots if v.op is not None and v.op.parent is body]
    while stack:
        op = stack.pop()
        if id(op) in need:
            continue
        need.add(id(op))
        for inner in op.walk():
            for v in inner.operands:
                if v.op is not None and v.op.parent is body and id(v.op) not in need:
                    stack.append(v.op)
    return need


def split_outputs(kernel: Operation) -> list[Operation]:
    """Replaces a multi-output kernel by one kernel per result (each with only the computes
    that result reads, and only the inputs those read); returns the new kernels."""
    body = kernel_body(kernel)
    outs = list(body.last.operands)
    parts = []
    for j, root in enumerate(outs):
        need = needed_computes(kernel, [root])
        block = Block()
        mapping: dict[Value, Value] = {}
        inputs: list[Value] = []
        for op in body:
            if id(op) not in need:
                continue
            for inner in op.walk():
                for v in inner.operands:
                    if v.is_block_arg and v.owner is body and v not in mapping:
                        mapping[v] = block.add_arg(v.type)
                        inputs.append(kernel.operands[v.index])
            block.append(op.clone(mapping))
        if root.is_block_arg and root not in mapping:
            mapping[root] = block.add_arg(root.type)
            inputs.append(kernel.operands[root.index])
        block.append(make_op("structured.return", [mapping[root]]))
        attrs = dict(kernel.attributes)
        part = make_op(KERNEL, inputs, attrs, [root.type], regions=[Region([block])])
        kernel.parent.insert_before(part, kernel)
        kernel.results[j].replace_all_uses_with(part.results[0])
        parts.append(part)
    kernel.erase()
    return parts


__all__ = ["Merged", "build_merged", "commit_merge", "discard", "in_order", "kernel_body", "merged_name", "needed_computes",
           "prune_inputs", "split_outputs", "toposort"]
