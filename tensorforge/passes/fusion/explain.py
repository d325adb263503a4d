"""``tensorforge explain MODEL --fusion``: the fusion groups, every decision with its reason, and a
picture of the fused graph.

The picture is Graphviz (one box per lowered kernel, coloured by fusion kind, one cluster per
fused kernel, the data edges between them) rendered to SVG or PNG by ``dot`` when it is
installed; otherwise the same content is written as an indented text file.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...ir.builtin import ModuleOp
from .log import FusionLog
from .passes import fuse_function

KIND_COLORS = {"elementwise": "#d8f0d8", "broadcast": "#d8ecf8", "injective": "#eeeeee",
               "reduction": "#fde8c8", "out_elementwise_fusable": "#f8d0d0", "opaque": "#c8c8c8"}


@dataclass
class FusionReport:
    module: ModuleOp          # the lowered, fused module
    log: FusionLog

    def text(self) -> str:
        return self.log.dump()


def explain_fusion(module: ModuleOp, target: Any = None, pipeline: str = "fuse") -> FusionReport:
    """Fuses a copy of ``module`` (graph level, already optimised as wanted) with ``pipeline``."""
    work = module.clone()
    log = FusionLog()
    for f in work.functions:
        fuse_function(f, target, pipeline, log)
    return FusionReport(work, log)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(log: FusionLog, title: str = "fusion") -> str:
    """Graphviz text: lowered kernels as nodes, fused kernels as clusters."""
    lines = [f"digraph {_quote(title)} {{", "  rankdir=TB; compound=true;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             f"  label={_quote(log.summary())}; labelloc=t; fontname=Helvetica;"]
    placed: set[str] = set()
    for i, g in enumerate(log.groups):
        single = len(g.labels) == 1
        if not single:
            lines.append(f"  subgraph cluster_{i} {{")
            lines.append(f"    label={_quote(f'#{i} {g.name}')}; style=rounded; color=\"#555555\"; fontsize=10;")
        for lab in g.labels:
            kind = log.nodes.get(lab, g.kind)
            lines.append(f"    {_quote(lab)} [fillcolor={_quote(KIND_COLORS.get(kind, '#ffffff'))}];")
            placed.add(lab)
        if not single:
            lines.append("  }")
    for a, b in log.edges:
        if a in placed and b in placed:
            lines.append(f"  {_quote(a)} -> {_quote(b)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text_picture(log: FusionLog) -> str:
    """The picture's content without Graphviz: each fused kernel, its members and where they feed."""
    feeds: dict[str, list[str]] = {}
    for a, b in log.edges:
        feeds.setdefault(a, []).append(b)
    group_of = {lab: i for i, g in enumerate(log.groups) for lab in g.labels}
    out = [log.summary(), ""]
    for i, g in enumerate(log.groups):
        out.append(f"[#{i}] {g.name} ({g.kind})")
        for lab in g.labels:
            targets = sorted({f"#{group_of[b]}" for b in feeds.get(lab, []) if group_of.get(b, i) != i})
            out.append(f"    {lab}" + (f"  -> {' '.join(targets)}" if targets else ""))
    return "\n".join(out) + "\n"


def write_picture(log: FusionLog, path: str | Path, title: str = "fusion") -> Path:
    """Writes the fused graph to ``path``: .svg/.png through ``dot`` when it is installed (the
    .dot source next to it), else a .txt picture; returns the file written."""
    path = Path(path)
    dot = shutil.which("dot")
    fmt = path.suffix.lstrip(".").lower()
    if dot is not None and fmt in ("svg", "png", "pdf"):
        src = path.with_suffix(".dot")
        src.write_text(to_dot(log, title))
        run = subprocess.run([dot, f"-T{fmt}", str(src), "-o", str(path)], capture_output=True, text=True,
                             timeout=300)
        if run.returncode == 0:
            return path
    if fmt == "dot":
        path.write_text(to_dot(log, title))
        return path
    txt = path.with_suffix(".txt")
    txt.write_text(to_text_picture(log))
    return txt


__all__ = ["FusionReport", "explain_fusion", "to_dot", "to_text_picture", "write_picture"]
