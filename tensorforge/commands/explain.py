"""`tensorforge explain`: what the graph optimiser and the fusion engine do to a model.

``--html report.html`` writes everything in one self-contained page (``tensorforge.report``);
``--bisect`` names the first op whose native result disagrees with the reference interpreter
(exit code 3 when one does).
"""
from __future__ import annotations

import argparse
import os
import time

from ..errors import TensorforgeError

DIVERGED = 3          # exit code of --bisect when a result is beyond tolerance
# --layout: default_pipeline's layout argument (None: where it pays)
LAYOUT_CHOICES = {"auto": None, "on": True, "off": False}


def _explain_load(args: argparse.Namespace):
    """MODEL imported into the graph dialect, and its example inputs (NumPy)."""
    from .loading import load_model, parse_shapes
    lm = load_model(args.model, args.batch, parse_shapes(args.shape), seed=args.seed)
    return lm.import_module(), lm.inputs


def _cmd_explain(args: argparse.Namespace) -> int:
    """Op counts, weights and peak planned memory of MODEL before and after the graph pipeline
    (after every pass with --passes)."""
    from ..passes.pipeline import ModuleStats, default_pipeline, trace_pipeline
    from ..ir.pass_manager import PassManager

    if args.html and not os.path.isdir(os.path.dirname(os.path.abspath(args.html))):
        raise TensorforgeError(f"cannot write the report to '{args.html}': its directory does not exist")
    t0 = time.perf_counter()
    module, inputs = _explain_load(args)
    load_s = time.perf_counter() - t0
    if args.html and args.target != "cpu":
        return _explain_gpu(args, module, inputs)
    if args.html or args.bisect:
        return _explain_native(args, module, inputs)
    layout = LAYOUT_CHOICES[args.layout]
    pm = PassManager.parse(args.pipeline) if args.pipeline else default_pipeline(args.target, layout=layout)
    before, rows = trace_pipeline(module, pm)
    after = rows[-1].after if rows else before
    mib = 1 << 20
    print(f"model     {args.model} (imported in {load_s:.2f} s)")
    print(f"pipeline  {pm.pipeline}")
    head = f"{'pass':<24} {'ms':>9} {'ops':>6} {'consts':>6} {'weights MiB':>11} {'peak MiB':>9}  changed"
    print(head)
    print("-" * len(head))

    def line(name: str, ms: str, st: ModuleStats, changed: str) -> None:
        print(f"{name:<24} {ms:>9} {st.ops:>6} {st.constants:>6} {st.weight_bytes / mib:>11.2f} "
              f"{st.peak_bytes / mib:>9.3f}  {changed}")
    line("(imported)", "", before, "")
    for r in rows if args.passes else []:
        line(r.name, f"{r.seconds * 1e3:.1f}", r.after, "yes" if r.changed else "no")
    line("(optimised)", f"{sum(r.seconds for r in rows) * 1e3:.1f}", after, "")
    print()
    print(f"{'op':<28} {'before':>7} {'after':>7}")
    for name in sorted(set(before.histogram) | set(after.histogram),
                       key=lambda n: (-before.histogram[n] - after.histogram[n], n)):
        print(f"{name:<28} {before.histogram[name]:>7} {after.histogram[name]:>7}")
    if getattr(args, "fusion", False):
        _explain_fusion(args, module)
    return 0


def _explain_fusion(args: argparse.Namespace, module) -> None:
    """``explain --fusion``: fuses the optimised module, prints the groups and every decision with
    its reason, and writes a picture of the fused graph (Graphviz where ``dot`` exists)."""
    from ..passes.fusion.explain import explain_fusion, write_picture

    target = None
    if args.target != "cpu":          # GPU fusion also asks ptxas whether each candidate fits
        from ..codegen.gpu.backend import gpu_target
        target = gpu_target(args.target)
    t0 = time.perf_counter()
    report = explain_fusion(module, target, pipeline=args.fusion_pipeline)
    print()
    where = f" for {args.target}" if target is not None else ""
    print(f"fusion    {args.fusion_pipeline}{where} ({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    print(report.text())
    stem = os.path.splitext(os.path.basename(args.model))[0]
    out = write_picture(report.log, args.output or f"{stem}.fusion.svg", title=stem)
    print(f"\npicture   {out}")


def _explain_native(args: argparse.Namespace, module, inputs) -> int:
    """``--html`` and ``--bisect``: both compile the model; the report also optimises it in place."""
    from ..passes.pipeline import optimize
    from ..progress import Progress
    from ..report import bisect, collect, render_html
    from ..report.html import precision_summary

    optimised = False
    if args.html:
        with Progress(f"explain {args.model}", total=5) as bar:
            report = collect(module, args.model, inputs, profile_runs=args.profile_runs, pipeline=args.pipeline,
                             step=lambda what: bar.advance(1, note=what))
        optimised = True
        try:
            with open(args.html, "w", encoding="utf-8") as f:
                f.write(render_html(report))
        except OSError as exc:
            raise TensorforgeError(f"cannot write the report to '{args.html}': {exc.strerror}; "
                                   f"give a path in an existing, writable directory") from None
        top = sorted(report.kernels, key=lambda k: -k.seconds)[:5]
        print(f"report    {args.html} ({len(report.kernels)} kernels, run {report.run_seconds * 1e3:.2f} ms, "
              f"arena {report.memory.arena_bytes / (1 << 20):.2f} MiB)")
        print(f"precision {precision_summary(report)}")
        for k in top:
            print(f"  {k.share:5.1f}%  {k.precision:<9} {k.name:<32} {' + '.join(k.ops)[:60]}")
    if not args.bisect:
        return 0
    if not optimised:
        optimize(module, None, args.pipeline)
    with Progress(f"bisect {args.model} (compile with every op result exposed, run, compare)", total=None):
        result = bisect(module, inputs, rtol=args.rtol, atol=args.atol)
    print(result.text())
    return DIVERGED if result.first is not None else 0


def _explain_gpu(args: argparse.Namespace, module, inputs) -> int:
    """``--html --target opencl|cuda``: the GPU kernels with their threads, shared memory and registers."""
    import tensorforge
    from ..report.gpu import kernel_rows, render_gpu_html
    cm = tensorforge.compile(module, inputs, target=args.target, passes=args.pipeline, db=None)
    try:
        with open(args.html, "w", encoding="utf-8") as f:
            f.write(render_gpu_html(args.model, cm.native))
    except OSError as exc:
        raise TensorforgeError(f"cannot write the report to '{args.html}': {exc.strerror}") from None
    rows = kernel_rows(cm.native.program, cm.native.target)
    bad = [r for r in rows if r["problems"]]
    print(f"report    {args.html} ({len(rows)} {args.target} kernels, {len(cm.native.program.launches)} launches, "
          f"{len(bad)} over a limit)")
    for r in bad[:10]:
        print(f"  {r['name']}: {'; '.join(r['problems'])}")
    return 0


def register(sub) -> None:
    from .loading import add_model_arguments
    e = sub.add_parser("explain", help="what the compiler does to a model: passes, fusion, kernels, memory; "
                                       "--html writes a report, --bisect finds a wrong kernel",
                       description="Without --html/--bisect: op counts and peak memory before/after the graph "
                                   "optimiser. Exit codes: 0 ok, 1 error, 3 --bisect found a divergence.")
    add_model_arguments(e)
    e.add_argument("--passes", action="store_true", help="a row after every pass of the pipeline")
    e.add_argument("--pipeline", default=None, help="a pipeline to run instead of the default one")
    e.add_argument("--layout", choices=tuple(LAYOUT_CHOICES), default="auto",
                   help="the blocked-layout pass: where it pays (default, on the CPU target), always, or never")
    e.add_argument("--fusion", action="store_true",
                   help="also fuse the optimised graph: groups, every decision with its reason, a picture")
    e.add_argument("--fusion-pipeline", default="fuse", help="fusion passes for --fusion (default: fuse)")
    e.add_argument("--output", default=None,
                   help="picture for --fusion (.svg/.png via Graphviz, .dot; default MODEL.fusion.svg)")
    e.add_argument("--target", choices=("cpu", "opencl", "cuda"), default="cpu",
                   help="--html: the backend to report on; opencl/cuda list the GPU kernels with threads, "
                        "shared memory and (cuda) registers and spills from NVRTC. --fusion: the target to "
                        "fuse for; opencl/cuda veto merges ptxas says do not fit, citing its numbers")
    e.add_argument("--html", default=None, metavar="FILE",
                   help="write one self-contained HTML report: graphs before/after, passes, fusion, every "
                        "kernel with its schedule, C and share of the run, the memory plan")
    e.add_argument("--profile-runs", type=int, default=10, metavar="N",
                   help="runs of the timed build behind the report's kernel shares (default 10)")
    e.add_argument("--bisect", action="store_true",
                   help="compare every op's native result with the reference interpreter and name the "
                        "first one beyond tolerance (exit code 3)")
    e.add_argument("--rtol", type=float, default=1e-4, help="--bisect: tolerance relative to max|reference|")
    e.add_argument("--atol", type=float, default=1e-6, help="--bisect: absolute tolerance")
    e.set_defaults(fn=_cmd_explain)
