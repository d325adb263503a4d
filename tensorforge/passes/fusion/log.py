"""Every fusion decision with its reason, in the spirit of XLA's priority-fusion dump.

    vertical    k12:conv -> k13:batch_norm                 applied   saves 3.1 MB
    vertical    k40:relu -> k41:conv                       rejected  a contraction takes only data movement ...

A decision names the kernels by label: ``k<N>:<op>`` for the N-th kernel lowering made (its
graph op's short name), ``+``-joined for a kernel already merged.  ``groups`` lists the final
kernels with the labels they hold.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Decision:
    strategy: str                    # vertical | horizontal | reuse | category | concat | split
    subjects: tuple[str, ...]        # kernel labels (producer first for vertical)
    fused: bool
    reason: str
    saved_bytes: float = 0.0

    def line(self, width: int = 56) -> str:
        arrow = " -> " if self.strategy in ("vertical", "reuse") else " + "
        who = arrow.join(self.subjects)
        if len(who) > width:
            who = who[:width - 3] + "..."
        verdict = "applied" if self.fused else "rejected"
        return f"{self.strategy:<11} {who:<{width}} {verdict:<9} {self.reason}"


@dataclass
class Group:
    """A kernel after fusion: its name and the lowered kernels (labels) it holds."""

    name: str
    labels: list[str]
    kind: str
    outputs: int


@dataclass
class FusionLog:
    """What one or more fusion passes did to a module.  Kernel labels persist across the passes
    that share a log (``labels``, keyed by kernel op), so a pipeline of several strategies
    reports in the same names."""

    decisions: list[Decision] = field(default_factory=list)
    kernels_before: int = 0
    kernels_after: int = 0
    nodes: dict[str, str] = field(default_factory=dict)          # label -> fusion kind, as lowered
    edges: list[tuple[str, str]] = field(default_factory=list)   # producer label -> consumer label
    labels: dict = field(default_factory=dict, repr=False)       # kernel op -> its labels
    next_label: int = 0
    _groups: dict[int, tuple[object, list[Group]]] = field(default_factory=dict, repr=False)
    _seen: dict[tuple, int] = field(default_factory=dict, repr=False)

    @property
    def groups(self) -> list[Group]:
        """The kernels of every fused function, with the lowered kernels each holds."""
        return [g for _, gs in self._groups.values() for g in gs]

    def set_groups(self, func, groups: list[Group]) -> None:
        self._groups[id(func)] = (func, groups)

    def record(self, strategy: str, subjects: tuple[str, ...], fused: bool, reason: str,
               saved_bytes: float = 0.0) -> None:
        """Adds a decision; the same rejected candidate seen again in a later round is kept once."""
        key = (strategy, subjects, fused, reason)
        if key in self._seen:
            return
        self._seen[key] = len(self.decisions)
        self.decisions.append(Decision(strategy, subjects, fused, reason, saved_bytes))

    @property
    def fused(self) -> list[Decision]:
        return [d for d in self.decisions if d.fused]

    @property
    def rejected(self) -> list[Decision]:
        return [d for d in self.decisions if not d.fused]

    def summary(self) -> str:
        saved = sum(d.saved_bytes for d in self.fused)
        from .cost import fmt_bytes
        return (f"kernels: {self.kernels_before} -> {self.kernels_after} "
                f"({len(self.fused)} decisions applied, {len(self.rejected)} candidates rejected, "
                f"~{fmt_bytes(saved)} of memory traffic saved per run)")

    def dump(self) -> str:
        lines = [self.summary(), "", "decisions:"]
        lines += ["  " + d.line() for d in self.decisions]
        lines += ["", "groups:"]
        for i, g in enumerate(self.groups):
            outs = f", {g.outputs} outputs" if g.outputs > 1 else ""
            lines.append(f"  #{i:<4} {g.name:<40} [{g.kind}{outs}]  {' '.join(g.labels)}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.dump()


__all__ = ["Decision", "FusionLog", "Group"]
