"""``explain --html --target opencl|cuda``: what the GPU backend made of a model, per kernel.

One row per kernel function: the structured kernel it came from, how it was scheduled, threads
per block, static shared memory, and (CUDA) the registers, spills and stack that ptxas reported
when NVRTC compiled it for sm_90, checked against the target's limits.  Then the launches in
program order (grid x block) and the source.
"""
from __future__ import annotations

from html import escape

from .html import CSS, _details, _table


def kernel_rows(program, target) -> list[dict]:
    """Per kernel: name, origin, schedule, threads, shared bytes, registers, spills, and the limits it breaks."""
    rows = []
    for name, k in program.kernels.items():
        res = k.resources or {}
        problems = []
        if k.threads > target.max_threads_per_block:
            problems.append(f"{k.threads} threads > {target.max_threads_per_block}")
        if k.shared_bytes > target.shared_per_block:
            problems.append(f"{k.shared_bytes} B shared > {target.shared_per_block}")
        regs = res.get("registers")
        if regs is not None and regs * k.threads > target.registers_per_sm:
            problems.append(f"{regs} registers x {k.threads} threads > {target.registers_per_sm}")
        spills = res.get("spill_stores", 0) + res.get("spill_loads", 0)
        if spills:
            problems.append(f"{spills} B spilled")
        rows.append({"name": name, "origin": k.origin, "schedule": k.schedule, "threads": k.threads,
                     "shared_bytes": k.shared_bytes, "registers": regs, "spill_bytes": spills if res else None,
                     "stack_bytes": res.get("stack_bytes"), "problems": problems})
    return rows


def render_gpu_html(model_name: str, gpu_model) -> str:
    """The report page for a ``GpuModel`` (``CompiledModel.native`` of a GPU target)."""
    program, target = gpu_model.program, gpu_model.target

    def num(v) -> str:
        return "#-" if v is None else f"#{v}"

    rows = kernel_rows(program, target)
    table = _table(["kernel", "from", "threads", "shared B", "registers", "spill B", "stack B", "limits", "schedule"],
                   [[escape(r["name"]), escape(r["origin"]), num(r["threads"]), num(r["shared_bytes"]),
                     num(r["registers"]), num(r["spill_bytes"]), num(r["stack_bytes"]),
                     escape("; ".join(r["problems"]) or "ok"), escape(r["schedule"])] for r in rows])
    launches = _table(["#", "kernel", "grid", "block"],
                      [[f"#{i}", escape(l.kernel), escape("x".join(map(str, l.grid))),
                        escape("x".join(map(str, l.block)))] for i, l in enumerate(program.launches)])
    compiled = ("compiled by NVRTC for " + target.arch) if program.language == "cuda" else "built for OpenCL"
    parts = [f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>tensorforge explain: {escape(model_name)} "
             f"({program.language})</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(model_name)} on {escape(target.name)} ({program.language})</h1>",
             f"<p class='note'>{len(program.kernels)} kernels, {len(program.launches)} launches, {compiled}; "
             f"weights {program.weights.nbytes} B, arena {program.arena_bytes} B, scratch {program.scratch_bytes} B; "
             f"limits: {target.max_threads_per_block} threads and {target.shared_per_block} B shared per block, "
             f"{target.registers_per_sm} registers per SM.</p>",
             "<h2>Kernels</h2>", _details(f"{len(rows)} kernels", table, len(rows)),
             "<h2>Launches</h2>", _details(f"{len(program.launches)} launches", launches, len(program.launches)),
             "<h2>Source</h2>", _details("kernel source", f"<pre>{escape(program.source)}</pre>", 10 ** 9),
             "</body></html>\n"]
    return "\n".join(parts)
