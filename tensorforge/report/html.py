"""A ``Report`` as one self-contained HTML file: inline CSS and SVG, no scripts, no external assets.

Everything is readable with JavaScript off (the collapsible parts are ``<details>``), so a headless
browser's screenshot shows the pictures and the tables as a person opening the file sees them.
"""
from __future__ import annotations

import zlib
from html import escape
from typing import Iterable

from ..passes.fusion.cost import fmt_bytes
from .collect import MemoryReport, Report
from .pictures import Picture, render_svg, to_text

MIB = 1 << 20
OPEN_LIMIT = 60           # tables longer than this start collapsed

CSS = """
body { font-family: Helvetica, Arial, sans-serif; margin: 16px 24px; color: #222; }
h1 { font-size: 22px; margin: 0 0 6px 0; } h2 { font-size: 18px; margin: 26px 0 8px 0; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } td.num { text-align: right; font-family: monospace; }
pre { font-size: 11px; background: #f8f8f8; padding: 6px; overflow-x: auto; margin: 4px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 8px 0; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 6px 12px; background: #fafafa; }
.card b { display: block; font-size: 18px; }
.pictures { display: grid; grid-template-columns: repeat(3, 1fr); gap: 12px; }
figure { margin: 0; border: 1px solid #ccc; border-radius: 6px; padding: 4px; }
figcaption { font-size: 12px; font-weight: bold; margin-bottom: 4px; }
.pic { max-height: 1000px; overflow: auto; } .pic svg { max-width: 100%; height: auto; }
.bar { background: #4a7bd0; height: 10px; display: inline-block; vertical-align: middle; }
.note { font-size: 12px; color: #555; } details { margin: 4px 0; } summary { cursor: pointer; font-size: 13px; }
"""


def render_html(report: Report) -> str:
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tensorforge explain: "
             f"{escape(report.model)}</title><style>{CSS}</style></head><body>"]
    parts += _header(report)
    parts += _pictures(report.pictures)
    parts += _kernels(report)
    parts += _passes(report)
    parts += _fusion(report)
    parts += _code(report)
    parts += _memory(report.memory)
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _header(r: Report) -> list[str]:
    cards = [("kernels", f"{len(r.kernels)} ({len(r.code)} distinct)"),
             ("run (profiling build)", f"{r.run_seconds * 1e3:.3f} ms"),
             ("compile", f"{r.compile_seconds:.2f} s"),
             ("graph ops", f"{r.before.ops} -> {r.after.ops}"),
             ("arena (peak plan)", fmt_bytes(r.memory.arena_bytes)),
             ("weights", fmt_bytes(r.memory.weight_bytes))]
    if r.max_abs_error is not None:
        cards.append(("max |error| vs interpreter", f"{r.max_abs_error:.2e}"))
    out = [f"<h1>tensorforge explain: {escape(r.model)}</h1>",
           f"<div class='note'>target {escape(r.target)} &middot; pipeline <code>{escape(r.pipeline)}</code> "
           f"&middot; fusion <code>{escape(r.fusion)}</code> &middot; times are means over {r.profile_runs} "
           f"runs after a warm-up</div>", "<div class='cards'>"]
    out += [f"<div class='card'>{escape(k)}<b>{escape(v)}</b></div>" for k, v in cards]
    out.append("</div>")
    out += [f"<div class='note'>{escape(n)}</div>" for n in r.notes]
    return out


def _pictures(pictures: list[Picture]) -> list[str]:
    out = ["<h2 id='graphs'>Graphs</h2>", "<div class='pictures'>"]
    for p in pictures:
        svg = render_svg(p)
        body = svg if svg is not None else f"<pre class='textpic'>{escape(to_text(p))}</pre>"
        note = f"<div class='note'>{escape(p.note)}</div>" if p.note else ""
        out.append(f"<figure class='graph'><figcaption>{escape(p.title)} ({_count(p)})</figcaption>{note}"
                   f"<div class='pic'>{body}</div></figure>")
    out.append("</div>")
    return out


def _count(p: Picture) -> str:
    n = sum(1 for x in p.nodes if not x.is_input)
    return f"{n} blocks" if p.note else f"{n} nodes"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "", row_cls: str = "") -> str:
    """``rows`` hold already-escaped HTML cells; a cell starting with '#' is numeric."""
    h = "".join(f"<th>{escape(c)}</th>" for c in head)
    body = []
    for row in rows:
        cells = "".join(f"<td class='num'>{c[1:]}</td>" if c.startswith("#") else f"<td>{c}</td>" for c in row)
        body.append(f"<tr class='{row_cls}'>{cells}</tr>" if row_cls else f"<tr>{cells}</tr>")
    return f"<table class='{cls}'><tr>{h}</tr>{''.join(body)}</table>"


def _details(title: str, inner: str, n: int) -> str:
    return f"<details{' open' if n <= OPEN_LIMIT else ''}><summary>{escape(title)}</summary>{inner}</details>"


def _kernels(r: Report) -> list[str]:
    top = max((k.share for k in r.kernels), default=1.0) or 1.0
    rows = [(f"#{k.index}", f"<a href='#fn-{escape(k.name)}'>{escape(k.name)}</a>",
             escape(" + ".join(k.ops)), escape(k.kind), f"<span class='precision'>{escape(k.precision)}</span>",
             f"#{k.seconds * 1e6:.1f}", f"#{k.share:.1f}",
             f"<span class='bar' style='width:{120 * k.share / top:.0f}px'></span>") for k in r.kernels]
    total = sum(k.seconds for k in r.kernels)
    return ["<h2 id='kernels'>Kernels</h2>",
            f"<div class='note'>Every call of <code>tf_run</code> in program order, timed in the library "
            f"(sum {total * 1e3:.3f} ms of {r.run_seconds * 1e3:.3f} ms per run). Precision: "
            f"{escape(precision_summary(r))}; int8 and bf16 are the quantized and bf16 contractions, "
            f"otherwise the element types a kernel writes (after what it reads when they differ).</div>",
            _table(["#", "C function", "fused ops", "kind", "precision", "µs / run", "% of run", ""], rows,
                   "kernel-table", "kernel-row")]


def precision_summary(r: Report) -> str:
    """``int8 3 kernels (41.0% of run), f32 12 (59.0%)``: how much of the run each precision takes."""
    calls: dict[str, int] = {}
    share: dict[str, float] = {}
    for k in r.kernels:
        calls[k.precision] = calls.get(k.precision, 0) + 1
        share[k.precision] = share.get(k.precision, 0.0) + k.share
    order = sorted(calls, key=lambda p: -share[p])
    return ", ".join(f"{p} {calls[p]} kernel(s) ({share[p]:.1f}% of run)" for p in order) or "no kernels"


def _passes(r: Report) -> list[str]:
    def row(name, ms, st, changed):
        return (escape(name), ms, f"#{st.ops}", f"#{st.constants}", f"#{st.weight_bytes / MIB:.2f}",
                f"#{st.peak_bytes / MIB:.3f}", changed)
    rows = [row("(imported)", "#", r.before, "")]
    rows += [row(p.name, f"#{p.seconds * 1e3:.1f}", p.after, "yes" if p.changed else "no") for p in r.passes]
    rows.append(row("(optimised)", f"#{sum(p.seconds for p in r.passes) * 1e3:.1f}", r.after, ""))
    hist_before, hist_after = r.before.histogram, r.after.histogram
    names = sorted(set(hist_before) | set(hist_after), key=lambda n: (-hist_before[n] - hist_after[n], n))
    hist = _table(["op", "before", "after"], [(escape(n), f"#{hist_before[n]}", f"#{hist_after[n]}") for n in names])
    return ["<h2 id='passes'>Pass pipeline</h2>",
            _table(["pass", "ms", "ops", "constants", "weights MiB", "peak live MiB", "changed"], rows, "pass-table"),
            _details(f"ops by name ({len(names)})", hist, len(names))]


def _fusion(r: Report) -> list[str]:
    log = r.log
    groups = [(f"#{i}", escape(g.name), escape(g.kind), f"#{len(g.labels)}", escape(" ".join(g.labels)))
              for i, g in enumerate(log.groups)]
    decisions = [(escape(d.strategy), escape(" + ".join(d.subjects)), "applied" if d.fused else "rejected",
                  escape(d.reason)) for d in log.decisions]
    return ["<h2 id='fusion'>Fusion</h2>", f"<div class='note'>{escape(log.summary())}</div>",
            _details(f"groups ({len(groups)})", _table(["#", "kernel", "kind", "ops", "members"], groups,
                                                        "group-table"), len(groups)),
            _details(f"decisions with reasons ({len(decisions)})",
                     _table(["strategy", "kernels", "verdict", "reason"], decisions, "decision-table"),
                     len(decisions))]


def _code(r: Report) -> list[str]:
    total = sum(c.seconds for c in r.code) or 1.0
    out = ["<h2 id='code'>Kernel code and schedules</h2>",
           "<div class='note'>One entry per distinct C function; its schedule is the trace of primitives "
           "applied to its loop nest (or the micro-kernel plan of a tensorized contraction).</div>"]
    for c in sorted(r.code, key=lambda c: -c.seconds):
        out.append(f"<h3 id='fn-{escape(c.name)}' style='font-size:14px;margin:12px 0 2px 0'>{escape(c.name)} "
                   f"<span class='note'>{c.calls} call(s), {100 * c.seconds / total:.1f}% of kernel time</span></h3>")
        out.append(f"<pre class='schedule'>{escape(c.schedule)}</pre>")
        out.append(f"<details><summary>generated C ({len(c.source.splitlines())} lines)</summary>"
                   f"<pre class='csource'>{escape(c.source)}</pre></details>")
    return out


def _color(name: str) -> str:
    h = zlib.crc32(name.encode()) % 360
    return f"hsl({h},55%,65%)"


def memory_svg(m: MemoryReport, width: int = 1300, height: int = 260) -> str:
    """Buffers as rectangles: x = the kernel calls they live across, y = their bytes in the arena."""
    steps = max(m.steps, 1)
    arena = max(m.arena_bytes, 1)
    sx, sy = width / steps, height / arena
    rects = []
    for b in m.buffers:
        x, w = b.first * sx, max((b.last - b.first + 1) * sx, 1.0)
        y, h = b.offset * sy, max(b.size * sy, 0.5)
        rects.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' fill='{_color(b.name)}' "
                     f"stroke='#333' stroke-width='0.3'><title>{escape(b.name)}: {fmt_bytes(b.size)} at "
                     f"{b.offset}, kernels {b.first}-{b.last}</title></rect>")
    return (f"<svg class='memory' xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height + 16}' "
            f"viewBox='0 0 {width} {height + 16}'><rect width='{width}' height='{height}' fill='#f4f4f4'/>"
            + "".join(rects) + f"<text x='2' y='{height + 12}' font-size='11'>kernel calls 0..{steps - 1} "
            f"&#8594;, arena offset 0..{fmt_bytes(arena)} &#8595;</text></svg>")


def _memory(m: MemoryReport) -> list[str]:
    reuse = m.naive_bytes / m.arena_bytes if m.arena_bytes else 1.0
    rows = [(escape(b.name), f"#{b.offset}", f"#{b.size}", f"#{b.first}", f"#{b.last}") for b in m.buffers]
    return ["<h2 id='memory'>Memory plan</h2>",
            f"<div class='note'>Peak: one arena of <b class='peak' data-bytes='{m.arena_bytes}'>"
            f"{fmt_bytes(m.arena_bytes)}</b> ({m.arena_bytes} bytes) holds all {len(m.buffers)} intermediates "
            f"(each in its own buffer: {fmt_bytes(m.naive_bytes)}, {reuse:.1f}x more); weights "
            f"{fmt_bytes(m.weight_bytes)}.</div>",
            memory_svg(m),
            _details(f"buffers ({len(rows)})", _table(["value", "offset", "bytes", "first kernel", "last kernel"],
                                                     rows, "buffer-table"), len(rows))]


__all__ = ["render_html", "memory_svg", "precision_summary"]
