"""Pictures of a model's dataflow for the HTML report: the graph before and after the optimiser,
and the fused kernels.

A picture is a DAG in program order.  Small ones are drawn node by node; big ones (BERT-base has
~700 graph ops) are cut into *blocks* first and each block is drawn as one box listing the ops it
holds.  The cuts are the points of the program where the fewest values are live (the residual
stream of a transformer layer plus its attention mask, the output of a ResNet block), so a block
is a layer, an attention or an MLP sub-block, a residual block: what a person would draw.

Graphviz's ``dot`` renders the SVG that goes inline into the report; without ``dot`` the same
content becomes an indented text listing.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from ..ir.builtin import FuncOp
from ..ir.core import Operation, Value
from ..passes.fusion.explain import KIND_COLORS
from ..passes.fusion.log import FusionLog

DETAIL_LIMIT = 120        # nodes drawn one by one up to this many; above, blocks
INPUT_COLOR = "#ffffff"
BLOCK_COLOR = "#e8e8f8"


@dataclass
class Node:
    label: str               # first line is the name; further lines are details
    color: str = "#ffffff"
    tooltip: str = ""
    kind: str = ""           # what a block summary counts (an op or kernel kind)
    is_input: bool = False


@dataclass
class Picture:
    """A DAG whose nodes are in program (topological) order; edges are (producer, consumer) indices."""

    title: str
    nodes: list[Node] = field(default_factory=list)
    edges: list[tuple[int, int]] = field(default_factory=list)
    note: str = ""           # what was collapsed, for the caption


def _shape(v: Value) -> str:
    shape = getattr(v.type, "shape", None)
    return "x".join(str(d) for d in shape) if shape is not None else str(v.type)


def _op_color(op: Operation) -> str:
    fusion = getattr(op.opdef, "fusion", None)
    return KIND_COLORS.get(fusion.name.lower(), "#ffffff") if fusion is not None else "#ffffff"


def _add_inputs(pic: Picture, func: FuncOp) -> dict[int, int]:
    """A node per function argument; returns the node index of each argument (by id)."""
    index: dict[int, int] = {}
    for i, a in enumerate(func.args):
        index[id(a)] = len(pic.nodes)
        pic.nodes.append(Node(f"{a.name_hint or f'input{i}'}\n{_shape(a)}", INPUT_COLOR, kind="input",
                              is_input=True))
    return index


def graph_picture(func: FuncOp, title: str) -> Picture:
    """Every graph op of ``func`` (constants left out: they are weights), coloured by fusion kind."""
    pic = Picture(title)
    index = _add_inputs(pic, func)
    for op in func.body:
        if op.name in ("graph.constant", "func.return"):
            continue
        me = len(pic.nodes)
        shapes = ", ".join(_shape(r) for r in op.results)
        pic.nodes.append(Node(f"{op.short_name}\n{shapes}", _op_color(op), f"{op.name}{op.location_str()}",
                              kind=op.short_name))
        _connect(pic, op, me, index)
    return pic


def kernel_picture(func: FuncOp, log: FusionLog | None, names: list[str], title: str) -> Picture:
    """The kernels of a lowered function, each labelled with its C name and the ops fused into it."""
    pic = Picture(title)
    index = _add_inputs(pic, func)
    kernels = [op for op in func.body if op.name == "structured.kernel"]
    for k, op in enumerate(kernels):
        labels = kernel_labels(op, log)
        kind = str(op.attributes.get("tf.fusion", ""))
        ops = " + ".join(_short(lab) for lab in labels)
        name = names[k] if k < len(names) else f"kernel {k}"
        me = len(pic.nodes)
        pic.nodes.append(Node(f"{name}\n{_wrap(ops)}", KIND_COLORS.get(kind, "#ffffff"), " ".join(labels),
                              kind=_kernel_kind(labels)))
        _connect(pic, op, me, index)
    return pic


def kernel_labels(kernel: Operation, log: FusionLog | None) -> list[str]:
    """The fusion log's labels of the lowered kernels merged into ``kernel`` (``k12:conv``, ...),
    each once: the parts of a split kernel (``k9:slice#0#2``) count as the op they came from."""
    labels = log.labels.get(kernel) if log is not None else None
    if not labels:
        return [str(kernel.attributes.get("sym_name", "kernel"))]
    return list(dict.fromkeys(lab.split("#", 1)[0] for lab in labels))


def _short(label: str) -> str:
    return label.split(":", 1)[-1]


MOVES = {"reshape", "squeeze", "unsqueeze", "transpose", "slice", "expand", "cast", "concat", "broadcast_to"}


def _kernel_kind(labels: list[str]) -> str:
    """What a block summary counts a kernel as: its compute ops (data movement left out)."""
    ops = [_short(lab) for lab in labels]
    work = [o for o in ops if o not in MOVES] or ops[:1]
    return "+".join(work[:3]) + ("+..." if len(work) > 3 else "")


def _wrap(text: str, width: int = 40) -> str:
    lines, line = [], ""
    for part in text.split(" + "):
        piece = part if not line else f"{line} + {part}"
        if len(piece) > width and line:
            lines.append(line + " +")
            line = part
        else:
            line = piece
    lines.append(line)
    if len(lines) > 4:
        lines = lines[:3] + [f"... ({text.count(' + ') + 1} ops)"]
    return "\n".join(lines)


def _connect(pic: Picture, op: Operation, me: int, index: dict[int, int]) -> None:
    seen = set()
    for v in op.operands:
        src = index.get(id(v))
        if src is not None and src not in seen:
            seen.add(src)
            pic.edges.append((src, me))
    for r in op.results:
        index[id(r)] = me


# ---- blocks for big pictures ---------------------------------------------------------------------
MAX_BLOCK = 40            # a block bigger than this is cut again at its own narrowest points


def blocks(pic: Picture, max_block: int = MAX_BLOCK) -> list[list[int]]:
    """Consecutive runs of non-input nodes, cut where the fewest values are live across the cut.

    Values live across more than a quarter of the program (BERT's attention mask, read by every
    layer) are not counted: they cross every cut alike.  A block still larger than ``max_block``
    is cut again at the narrowest points inside it."""
    body = [i for i, n in enumerate(pic.nodes) if not n.is_input]
    if len(body) < 2:
        return [body] if body else []
    pos = {n: p for p, n in enumerate(body)}
    last_use = list(range(len(body)))
    for a, b in pic.edges:
        if a in pos and b in pos:
            last_use[pos[a]] = max(last_use[pos[a]], pos[b])
    long_lived = max(len(body) // 4, 8)
    delta = [0] * (len(body) + 1)          # live[p]: values made at or before p and used after p
    for p, end in enumerate(last_use):
        if p < end <= p + long_lived:
            delta[p] += 1
            delta[end] -= 1
    live, cur = [], 0
    for p in range(len(body) - 1):
        cur += delta[p]
        live.append(cur)
    spans = _split(live, 0, len(body), max_block)
    return _merge_small([body[a:b] for a, b in spans], cap=max_block)


def _split(live: list[int], start: int, stop: int, max_block: int) -> list[tuple[int, int]]:
    """[start, stop) cut after every position whose live count is the interior's minimum."""
    if stop - start <= max_block:
        return [(start, stop)]
    inner = live[start:stop - 1]
    fewest = min(inner)
    cuts = [start + i + 1 for i, n in enumerate(inner) if n == fewest]
    out, a = [], start
    for b in cuts + [stop]:
        out += _split(live, a, b, max_block) if (a, b) != (start, stop) else [(a, b)]
        a = b
    return out


def _merge_small(groups: list[list[int]], smallest: int = 3, cap: int = MAX_BLOCK) -> list[list[int]]:
    """Joins tiny blocks (a LayerNorm between two residual adds, the chain of a ResNet stem) to
    their neighbour, so that every box carries some content; no block grows beyond ``cap``."""
    out: list[list[int]] = []
    for g in groups:
        if out and (len(g) < smallest or len(out[-1]) < smallest) and len(out[-1]) + len(g) <= cap:
            out[-1] = out[-1] + g
        else:
            out.append(list(g))
    return out


def collapse(pic: Picture, limit: int = DETAIL_LIMIT) -> Picture:
    """``pic`` itself when it has at most ``limit`` nodes, else one box per block (see ``blocks``)."""
    if len(pic.nodes) <= limit:
        return pic
    groups = blocks(pic)
    out = Picture(pic.title)
    where: dict[int, int] = {}
    for i, n in enumerate(pic.nodes):
        if n.is_input:
            where[i] = len(out.nodes)
            out.nodes.append(n)
    for b, members in enumerate(groups):
        hist = Counter(pic.nodes[i].kind for i in members)
        lines = [f"{count}x {kind}"[:36] for kind, count in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0]))]
        if len(lines) > 6:
            lines = lines[:5] + [f"... {len(lines) - 5} more kinds"]
        first, last = (pic.nodes[members[i]].label.split("\n")[0][:24] for i in (0, -1))
        head = f"block {b}: {len(members)} nodes"
        out_shape = pic.nodes[members[-1]].label.split("\n")[-1]
        label = "\n".join([head] + lines + [f"{first} ... {last}", f"-> {out_shape}"])
        for i in members:
            where[i] = len(out.nodes)
        out.nodes.append(Node(label, BLOCK_COLOR, f"nodes {members[0]}..{members[-1]}", kind="block"))
    seen = set()
    for a, b in pic.edges:
        e = (where[a], where[b])
        if e[0] != e[1] and e not in seen:
            seen.add(e)
            out.edges.append(e)
    out.note = (f"{len(pic.nodes)} nodes drawn as {len(groups)} blocks, cut where the fewest values are live; "
                f"each block lists the ops it holds")
    return out


# ---- rendering --------------------------------------------------------------------------------
def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(pic: Picture) -> str:
    lines = [f"digraph {_quote(pic.title)} {{", "  rankdir=TB; nodesep=0.25; ranksep=0.3;",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10, margin="0.08,0.03"];',
             '  edge [color="#666666", arrowsize=0.6];']
    for i, n in enumerate(pic.nodes):
        shape = ", shape=ellipse" if n.is_input else ""
        tip = f", tooltip={_quote(n.tooltip)}" if n.tooltip else ""
        lines.append(f"  n{i} [label={_quote(n.label)}, fillcolor={_quote(n.color)}{shape}{tip}];")
    lines += [f"  n{a} -> n{b};" for a, b in pic.edges]
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_text(pic: Picture) -> str:
    """The picture without Graphviz: one line per node and where its result goes."""
    feeds: dict[int, list[int]] = {}
    for a, b in pic.edges:
        feeds.setdefault(a, []).append(b)
    out = []
    for i, n in enumerate(pic.nodes):
        head, *rest = n.label.split("\n")
        to = f"  -> {', '.join(f'[{j}]' for j in feeds.get(i, []))}" if feeds.get(i) else ""
        out.append(f"[{i}] {head}  {' | '.join(rest)}{to}")
    return "\n".join(out) + "\n"


_XML_HEAD = re.compile(r"^.*?(?=<svg)", re.S)


def render_svg(pic: Picture, timeout: float = 120.0) -> str | None:
    """Inline SVG (no XML prolog) through ``dot``; None when ``dot`` is missing or fails."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    try:
        run = subprocess.run([dot, "-Tsvg"], input=to_dot(pic), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if run.returncode != 0:
        return None
    return _XML_HEAD.sub("", run.stdout, count=1)


__all__ = ["DETAIL_LIMIT", "Node", "Picture", "blocks", "collapse", "graph_picture", "kernel_labels",
           "kernel_picture", "render_svg", "to_dot", "to_text"]
