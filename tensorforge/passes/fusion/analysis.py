"""The kernel graph of a function: producers, consumers, paths, post-dominators.

Fusion groups must stay acyclic: merging a set of kernels is legal only if no path leaves the
set and comes back (``closes_cycle``).  Grouping follows post-dominators (as TVM's FuseOps): a
kernel whose results go several ways can join the kernel where all those ways meet, its
immediate post-dominator, together with every kernel on the paths in between
(``paths_between``); that set is closed, so merging it never makes a cycle.

The graph is read from the IR's use lists each time it is asked, since fusion rewrites the
function as it goes; ``KernelGraph`` snapshots program positions for one round.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ...ir.builtin import FuncOp
from ...ir.core import Operation
from .kinds import KERNEL

EXIT = None       # the virtual node after the function's return


def kernels_of(func: FuncOp) -> list[Operation]:
    return [op for op in func.body if op.name == KERNEL]


def consumers(kernel: Operation) -> list[Operation]:
    """Kernels reading a result of ``kernel``, in first-use order, each once."""
    seen: dict[int, Operation] = {}
    for r in kernel.results:
        for user, _ in r.uses:
            if user.name == KERNEL:
                seen.setdefault(id(user), user)
    return list(seen.values())


def producers(kernel: Operation) -> list[Operation]:
    seen: dict[int, Operation] = {}
    for v in kernel.operands:
        if v.op is not None and v.op.name == KERNEL:
            seen.setdefault(id(v.op), v.op)
    return list(seen.values())


def escapes(kernel: Operation, inside: Iterable[Operation] = ()) -> bool:
    """Whether a result of ``kernel`` is used by something other than ``inside`` kernels
    (another kernel, the function's return)."""
    ids = {id(k) for k in inside}
    return any(id(u) not in ids for r in kernel.results for u, _ in r.uses)


def returned(kernel: Operation) -> bool:
    """Whether a result of ``kernel`` is used by a non-kernel op (the function's return)."""
    return any(u.name != KERNEL for r in kernel.results for u, _ in r.uses)


class KernelGraph:
    """Program positions of one function's kernels, for path queries during one round."""

    def __init__(self, func: FuncOp):
        self.func = func
        self.kernels = kernels_of(func)
        self.pos = {id(k): i for i, k in enumerate(self.kernels)}

    def position(self, k: Operation) -> int:
        return self.pos[id(k)]

    def closes_cycle(self, members: Sequence[Operation]) -> Operation | None:
        """A kernel outside ``members`` on a path from one member to another (merging them
        would make a cycle), or None."""
        ids = {id(k) for k in members}
        limit = max(self.pos[id(k)] for k in members)
        stack = [c for k in members for c in consumers(k) if id(c) not in ids]
        seen: set[int] = set()
        while stack:
            k = stack.pop()
            if id(k) in seen or id(k) not in self.pos or self.pos[id(k)] > limit:
                continue
            seen.add(id(k))
            for c in consumers(k):
                if id(c) in ids:
                    return k
                stack.append(c)
        return None

    def reachable(self, src: Operation, dst: Operation) -> bool:
        """Whether a path of kernels leads from ``src`` to ``dst``."""
        limit = self.pos[id(dst)]
        stack, seen = [src], set()
        while stack:
            k = stack.pop()
            if k is dst:
                return True
            if id(k) in seen or self.pos.get(id(k), limit + 1) > limit:
                continue
            seen.add(id(k))
            stack.extend(consumers(k))
        return False

    def paths_between(self, src: Operation, dst: Operation) -> list[Operation]:
        """Every kernel on a path from ``src`` to ``dst`` (both included), in program order."""
        limit = self.pos[id(dst)]
        fwd: dict[int, Operation] = {}
        stack = [src]
        while stack:
            k = stack.pop()
            if id(k) in fwd or self.pos.get(id(k), limit + 1) > limit:
                continue
            fwd[id(k)] = k
            stack.extend(consumers(k))
        back: dict[int, Operation] = {}
        stack = [dst]
        while stack:
            k = stack.pop()
            if id(k) in back or id(k) not in fwd:
                continue
            back[id(k)] = k
            stack.extend(producers(k))
        return sorted(back.values(), key=self.position)

    def post_dominators(self) -> dict[int, Operation | None]:
        """id(kernel) -> its immediate post-dominator (``EXIT`` when its results reach the
        function's return or are unused on some path).  Cooper-Harvey-Kennedy intersection over
        the post-dominator tree, built in reverse program order (a topological order)."""
        ipdom: dict[int, Operation | None] = {}
        depth: dict[int, int] = {}

        def up(k: Operation | None) -> Operation | None:
            return ipdom[id(k)]

        def lca(a: Operation | None, b: Operation | None) -> Operation | None:
            while a is not b:
                if a is EXIT or b is EXIT:
                    return EXIT
                if depth[id(a)] >= depth[id(b)]:
                    a = up(a)
                else:
                    b = up(b)
            return a

        for k in reversed(self.kernels):
            succ: list[Operation | None] = list(consumers(k))
            if returned(k) or any(not r.uses for r in k.results) or not succ:
                succ.append(EXIT)
            node = succ[0]
            for s in succ[1:]:
                node = lca(node, s)
            ipdom[id(k)] = node
            depth[id(k)] = 1 if node is EXIT else depth[id(node)] + 1
        return ipdom


__all__ = ["EXIT", "KernelGraph", "consumers", "escapes", "kernels_of", "producers", "returned"]
