"""The outputs of ``tensorforge bench``: the text table, the JSON file and the PNG bar chart.

All three are made from the plain-data result of ``runner.bench_models``, so the table, the
JSON and the chart cannot disagree.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

from .peers import LABELS


def _num(value: Any, fmt: str, missing: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return format(value, fmt)


def _model_header(m: dict) -> str:
    parts = [f"{m['model']} ({m['kind']}"]
    if m.get("precision", "f32") != "f32":
        cal = m.get("calibration")
        parts.append(f"tensorforge {m['precision']}" + (f", calibrated on {cal['samples']} sample(s) from "
                                                         f"{cal['source']}" if cal else ""))
    if m.get("gflop") is not None:
        parts.append(f"{m['gflop']:.3g} GFLOP, {m['mbytes']:.3g} MB moved at least, "
                     f"{m['intensity']:.3g} flop/B")
        if m.get("memory_bound") is not None:
            parts.append("memory-bound" if m["memory_bound"] else "compute-bound")
    tuning = m.get("tuning")
    if tuning:
        phases = ", ".join(f"{name} {sec:.0f} s" for name, sec in tuning.get("phases", {}).items())
        parts.append(f"tuning took {tuning['seconds']:.0f} s (budget {tuning['budget_s']:g} s for the whole tune"
                     + (f": {phases}" if phases else "")
                     + f"), {tuning['trials']} trial(s) over {tuning['tasks']} task(s)")
    check = m["check"]
    if check["reference"] is None:
        verdict = "outputs not checked: " + check.get("note", "no reference")
    elif check["tol"] is None:
        verdict = (f"outputs against float32 {check['reference']}: max rel err {check['max_rel_err']:.1e}; "
                   f"{check.get('note', 'not checked')}")
    elif check["ok"]:
        verdict = f"outputs match {check['reference']} (max rel err {check['max_rel_err']:.1e})"
    else:
        verdict = (f"OUTPUT MISMATCH against {check['reference']}: max rel err {check['max_rel_err']:.1e} "
                   f"> {check['tol']:.0e}")
    return "; ".join(parts) + ")\n  " + verdict


def format_table(result: dict) -> str:
    """The human-readable report: one block per model, one row per contender."""
    info = result["info"]
    lines = [f"tensorforge bench, {info['date']}, {info['cpu']}, {info['threads']} thread(s), "
             f"median of up to {info['repeats']} interleaved rounds (each contender's turn: a "
             f"{info.get('pause_s', 0):g} s pause, one untimed call, {info.get('block', 1)} timed calls) "
             f"after {info['warmup']} warm-up"]
    if result.get("roofline") is None:
        lines.append("(no machine peak measured yet: run `tensorforge bench --roofline` once for % of peak)")
    else:
        r = result["roofline"]
        lines.append(f"machine: {r['gemm_gflops']:.0f} GFLOP/s GEMM peak on {r['threads']} thread(s), "
                     f"{r['copy_gbs']:.1f} GB/s copy bandwidth (measured {r['measured']})")
        if r.get("load", 0) > r["threads"]:
            lines.append(f"warning: the peak was measured on a busy machine (load {r['load']:.1f}); "
                         f"rerun with --roofline when it is quiet")
    load = max(info.get("load_before", 0), info.get("load_after", 0))
    if load > info["cores"]:
        lines.append(f"warning: the machine was busy (load average {load:.1f} on {info['cores']} cores): "
                     f"absolute times are inflated, compare the ratios")
    tuned = any("tuned_speedup" in c for m in result["models"] for c in m["contenders"])
    head = (f"  {'contender':<24}{'median ms':>10}{'tf speedup':>11}" + (f"{'tuned x':>9}" if tuned else "")
            + f"{'setup s':>9}{'GFLOP/s':>9}{'% peak':>7}{'GB/s':>7}{'% bw':>6}{'rel err':>9}")
    for m in result["models"]:
        lines += ["", _model_header(m), head, "  " + "-" * (len(head) - 2)]
        bound = m.get("memory_bound")
        for c in m["contenders"]:
            speed = "-" if c["key"] == "tensorforge" else _num(c["tf_speedup"], ".2f") + "x"
            against_tuned = ""
            if tuned:
                against_tuned = f"{_num(c.get('tuned_speedup'), '.2f') + 'x' if 'tuned_speedup' in c else '-':>9}"
            lines.append(
                f"  {c['name']:<24}{_num(c['median_ms'], '.2f'):>10}{speed:>11}{against_tuned}"
                f"{_num(c['setup_s'], '.1f'):>9}"
                f"{_num(c.get('gflops'), '.1f'):>9}{_num(c.get('pct_peak'), '.0f'):>7}"
                f"{_num(c.get('gbs') if bound else None, '.1f'):>7}"
                f"{_num(c.get('pct_bandwidth') if bound else None, '.0f'):>6}"
                f"{_num(c['max_rel_err'], '.1e'):>9}")
        for s in m["skipped"]:
            lines.append(f"  skipped {LABELS.get(s['peer'], s['peer'])}: {s['reason']}")
        lines += _agreement(m)
    lines.append("")
    lines.append("tf speedup = peer median / tensorforge median (>1: tensorforge is faster); "
                 "setup = compile/export time; rel err = max |out - ref| / max |ref|")
    if tuned:
        lines.append("tuned x = median / tensorforge tuned's median (on the untuned row: what tuning gained)")
    return "\n".join(lines)


def _agreement(m: dict) -> list[str]:
    """A reduced-precision bench's accuracy side: every contender against the float32 reference,
    and what sets the contenders apart (how the peer was quantized, a peer without the precision)."""
    if m.get("precision", "f32") == "f32":
        return []
    rows = [c for c in m["contenders"] if c.get("max_abs_diff") is not None]
    lines = [f"  agreement with float32 {m['check']['reference']} on the bench inputs:"] if rows else []
    for c in rows:
        top1 = "" if c.get("top1") is None else f"  top-1 {100 * c['top1']:.0f}%"
        lines.append(f"    {c['name']:<24} max |diff| {c['max_abs_diff']:.2e}  rel err {c['max_rel_err']:.1e}{top1}")
    lines += [f"  note: {c['name']}: {c['note']}" for c in m["contenders"] if c.get("note")]
    return lines


def write_json(result: dict, path: str | os.PathLike) -> None:
    _parent(path)
    with open(path, "w") as f:
        json.dump(result, f, indent=1, allow_nan=True)


def write_chart(result: dict, path: str | os.PathLike) -> None:
    """A grouped bar chart: every contender's latency relative to tensorforge, per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = result["models"]
    keys = ["tensorforge"] + [k for k in LABELS if k != "tensorforge"
                              and any(c["key"] == k for m in models for c in m["contenders"])]
    width = 0.8 / len(keys)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(models) * len(keys) ** 0.5 + 2), 4.5))
    for i, key in enumerate(keys):
        xs, ys, ms = [], [], []
        for j, m in enumerate(models):
            by_key = {c["key"]: c for c in m["contenders"]}
            if key in by_key:
                xs.append(j + (i - (len(keys) - 1) / 2) * width)
                ys.append(by_key[key]["median_ms"] / by_key["tensorforge"]["median_ms"])
                ms.append(by_key[key]["median_ms"])
        bars = ax.bar(xs, ys, width, label=LABELS[key])
        for bar, ms_ in zip(bars, ms):
            label = f"{ms_:.0f}" if ms_ >= 100 else f"{ms_:.3g}"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xticks(range(len(models)), [m["model"] for m in models])
    ax.set_ylabel("latency / tensorforge latency (lower is better)")
    info = result["info"]
    ax.set_title(f"tensorforge bench, {info['threads']} thread(s), {info['date'][:10]} (labels: median ms)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(len(keys), 5), frameon=False)
    fig.tight_layout()
    _parent(path)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _parent(path) -> None:
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
