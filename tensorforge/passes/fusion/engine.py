"""The state of one fusion run and the one way every strategy merges kernels: ``try_merge``.

A candidate (a set of kernels) goes through the same steps whatever strategy proposed it:
kind rules (the strategy's), no cycle, the merged kernel built and simplified (inline where
recomputation beats a buffer), the contraction's index maps, then the cost model's vetoes and
savings, then (on a GPU target) what ptxas says the merged kernel needs (``gpu_resources.py``).
The decision and its reason go to the log either way; a rejected candidate is
remembered so that later rounds do not rebuild it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ...ir.builtin import FuncOp
from ...ir.core import Operation
from .analysis import KernelGraph, consumers, kernels_of
from .cost import CostModel, Machine, fmt_bytes
from .inline import simplify_kernel
from .kinds import kernel_kind, kind_name
from .log import FusionLog, Group
from .merge import build_merged, commit_merge, discard
from .rules import contraction_maps

Rule = Callable[[Sequence[Operation]], str | None]


class Fusion:
    """One function being fused: its cost model, the log, and the label of each kernel."""

    def __init__(self, func: FuncOp, machine: Machine, log: FusionLog | None = None,
                 mapped: Callable[[Operation], bool] | None = None,
                 resources: Callable[[Operation], str | None] | None = None):
        self.func = func
        self.resources = resources          # merged kernel -> why it does not fit the GPU, or None
        self.machine = machine
        self.model = CostModel(machine, mapped)
        self.log = log if log is not None else FusionLog()
        self.labels: dict[Operation, list[str]] = self.log.labels
        self._graph: KernelGraph | None = None
        self._rejected: dict[tuple[int, ...], tuple[Operation, ...]] = {}
        self.made_by: dict[Operation, str] = {}      # merged kernel -> the strategy that made it
        kernels = kernels_of(func)
        fresh = [k for k in kernels if k not in self.labels]
        for k in fresh:
            self.adopt(k)
        for k in fresh:
            for c in consumers(k):
                self.log.edges.append((self.labels[k][0], self.labels[c][0]))

    # ---- bookkeeping ------------------------------------------------------------------------
    def label(self, k: Operation) -> str:
        return "+".join(self.labels.get(k) or [str(k.attributes.get("sym_name", "kernel"))])

    def adopt(self, k: Operation, labels: list[str] | None = None) -> None:
        """Registers a kernel not made by ``try_merge`` (lowered, or a part of a split)."""
        if labels is None:
            labels = [f"k{self.log.next_label}:{k.attributes.get('sym_name', 'kernel')}"]
            self.log.next_label += 1
            self.log.nodes[labels[0]] = kind_name(kernel_kind(k))
        self.labels[k] = labels
        self._graph = None

    @property
    def graph(self) -> KernelGraph:
        if self._graph is None:
            self._graph = KernelGraph(self.func)
        return self._graph

    def kernels(self) -> list[Operation]:
        return kernels_of(self.func)

    def reject(self, strategy: str, members: Sequence[Operation], reason: str) -> None:
        self.log.record(strategy, tuple(self.label(k) for k in members), False, reason)

    # ---- the merge ---------------------------------------------------------------------------
    def try_merge(self, members: Sequence[Operation], strategy: str, rule: Rule | None = None) -> Operation | None:
        """Merges ``members`` into one kernel if the rules, the cycle check, the cost model and
        (GPU) ``resources`` allow; returns the new kernel or None.  Every outcome is logged."""
        members = sorted(set(members), key=self.graph.position)
        key = tuple(id(k) for k in members)
        if key in self._rejected:
            return None
        subjects = tuple(self.label(k) for k in members)
        reason = rule(members) if rule is not None else None
        if reason is None:
            through = self.graph.closes_cycle(members)
            if through is not None:
                reason = f"would make a cycle through {self.label(through)}"
        if reason is not None:
            return self._remember(key, members, strategy, subjects, reason)
        merged = build_merged(members)
        simplify_kernel(merged.kernel)
        reason = contraction_maps(merged.kernel)
        verdict = None
        if reason is None:
            verdict = self.model.judge(members, merged.kernel, merged.inner)
            if not verdict.ok:
                reason = verdict.reason
        if reason is None and self.resources is not None:
            reason = self.resources(merged.kernel)
        if reason is not None:
            discard(merged.kernel)
            return self._remember(key, members, strategy, subjects, reason)
        labels = [lab for k in members for lab in self.labels.pop(k, [self.label(k)])]
        kernel = commit_merge(members, merged)
        self.labels[kernel] = labels
        self.made_by[kernel] = strategy
        self._graph = None
        self.log.record(strategy, subjects, True, verdict.reason + _details(verdict), verdict.saved_bytes)
        return kernel

    def _remember(self, key, members, strategy, subjects, reason) -> None:
        self._rejected[key] = tuple(members)          # holding them keeps their ids unique
        self.log.record(strategy, subjects, False, reason)
        return None

    def finish(self) -> None:
        """Adds the kernels now in the function to the log's group list."""
        self.log.set_groups(self.func, [Group(str(k.attributes.get("sym_name", "kernel")),
                                              list(self.labels.get(k, [])), kind_name(kernel_kind(k)),
                                              len(k.results)) for k in self.kernels()])


def _details(v) -> str:
    parts = []
    if v.live_registers:
        parts.append(f"{v.live_registers} live vregs")
    if v.footprint:
        parts.append(f"row {fmt_bytes(v.footprint)} in cache")
    return f" ({', '.join(parts)})" if parts else ""


__all__ = ["Fusion"]
