"""Vertical fusion: producers into their consumers, along post-dominators.

Kernels are visited last to first, so consumers settle before their producers: a chain of
data movement ahead of a GEMM folds into the GEMM's loads (a prologue) before the GEMM is
offered to its own producer, and an activation joins its GEMM/conv (an epilogue) after the
activation's own consumers have been considered.

- First, each GEMM/conv takes the elementwise chain after it as its epilogue.
- A kernel whose results all go to one kernel merges with it.
- A kernel whose results go several ways merges with its immediate post-dominator together
  with every kernel on the paths in between (the exponentials of a softmax with both the sum
  and the division reading them), if all of them may fuse.
- With ``multi_output`` (the reuse strategy), a kernel whose result also leaves the group (a
  function output, another kernel) still joins a consumer and the merged kernel returns the
  value as an extra output.

Multi-output data-movement kernels whose results go different ways (a ``split``) are first cut
into one kernel per result, so that each part can fold into its own consumer.
"""
from __future__ import annotations

from typing import Sequence

from ...ir.core import Operation
from ...ir.opdef import FusionKind
from .analysis import EXIT, consumers, producers, returned
from .engine import Fusion
from .kinds import kernel_kind
from .merge import split_outputs
from .rules import vertical_rule


def edge_rule(members: Sequence[Operation]) -> str | None:
    """The kind rule for every producer -> consumer edge inside ``members``."""
    ids = {id(k) for k in members}
    for p in members:
        for c in consumers(p):
            if id(c) in ids:
                why = vertical_rule(p, c)
                if why is not None:
                    return why
    return None


def split_fanout(fz: Fusion) -> int:
    """Cuts each multi-output kernel of data movement whose results feed different kernels.

    A kernel that category fusion made is left whole: its members were put together because
    none of them fused with its consumers, so cutting it would only undo the merge, and the
    next round would make it again (Llama's RoPE of q and k beside the v slice went round four
    times, to the same kernels)."""
    count = 0
    for k in fz.kernels():
        if len(k.results) < 2 or kernel_kind(k) > FusionKind.INJECTIVE or fz.made_by.get(k) == "category":
            continue
        users = {id(u) for r in k.results for u, _ in r.uses}
        if len(users) < 2:
            continue
        base = fz.labels.pop(k, [fz.label(k)])
        parts = split_outputs(k)
        for j, part in enumerate(parts):
            fz.adopt(part, [f"{lab}#{j}" for lab in base])
        _rewire_picture(fz, base, parts)
        fz.log.record("split", tuple(base), True, f"{len(parts)} results go different ways: one kernel each")
        count += 1
    return count


def _rewire_picture(fz: Fusion, base: list[str], parts: list[Operation]) -> None:
    """The log's graph shows the parts of a split kernel instead of the kernel."""
    gone = set(base)
    kind = fz.log.nodes.pop(base[0], "injective")
    fz.log.edges = [e for e in fz.log.edges if e[0] not in gone and e[1] not in gone]
    for part in parts:
        me = fz.labels[part][0]
        fz.log.nodes[me] = kind
        fz.log.edges += [(me, fz.labels[c][0]) for c in consumers(part) if c in fz.labels]
        fz.log.edges += [(fz.labels[p][0], me) for p in producers(part) if p in fz.labels]


def fuse_epilogues(fz: Fusion, strategy: str = "vertical") -> int:
    """First priority: each GEMM/conv takes the chain of elementwise ops after it as its epilogue
    (bias, normalisation, activation, residual add), before those ops are offered elsewhere (a
    ReLU between a convolution and a max pool joins the convolution, where the micro-kernel
    applies it in registers, not the pool)."""
    total = 0
    for k in reversed(fz.kernels()):     # of two contractions meeting at an add, the later takes it
        while k is not None and k.parent is not None and kernel_kind(k) == FusionKind.OUT_ELEMENTWISE_FUSABLE:
            cons = consumers(k)
            if len(cons) != 1 or returned(k) or kernel_kind(cons[0]) > FusionKind.INJECTIVE:
                break
            k = fz.try_merge([k, cons[0]], strategy, edge_rule)
            total += k is not None
    return total


def fuse_vertical(fz: Fusion, multi_output: bool = False, strategy: str = "vertical") -> int:
    """Runs rounds of vertical merges until none applies; returns how many merges were made."""
    split_fanout(fz)
    total = fuse_epilogues(fz, strategy) if not multi_output else 0
    while True:
        merged = 0
        ipdom = fz.graph.post_dominators()
        for p in reversed(fz.kernels()):
            if p.parent is None:
                continue
            if _offer(fz, p, ipdom, multi_output, strategy):
                merged += 1
        total += merged
        if not merged:
            return total


def _offer(fz: Fusion, p: Operation, ipdom: dict, multi_output: bool, strategy: str) -> bool:
    cons = consumers(p)
    if not cons:
        return False
    leaves = returned(p)
    if len(cons) == 1 and not leaves:
        return fz.try_merge([p, cons[0]], strategy, edge_rule) is not None
    if not leaves:
        d = ipdom.get(id(p), EXIT)
        if d is not EXIT and d.parent is not None:
            group = fz.graph.paths_between(p, d)
            if fz.try_merge(group, strategy, edge_rule) is not None:
                return True
    if not multi_output:
        if strategy == "vertical" and (leaves or len(cons) > 1):
            reason = ("its result is also a function output" if leaves else
                      f"its results go {len(cons)} ways that do not all fuse")
            fz.reject(strategy, [p] + cons, reason + " (fuse-reuse returns it as an extra output)")
        return False
    for c in cons:
        if fz.try_merge([p, c], "reuse", edge_rule) is not None:
            return True
    return False


__all__ = ["edge_rule", "fuse_vertical", "split_fanout"]
