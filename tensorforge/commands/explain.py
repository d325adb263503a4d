"""`tensorforge explain`: what the graph optimiser and the fusion engine do to a model."""
from __future__ import annotations

import argparse
import time


def _explain_load(model: str, batch: int | None):
    """A zoo name or an .onnx path, imported into the graph dialect."""
    import os
    if model.endswith(".onnx") or os.path.isfile(model):
        from ..frontends.onnx import import_onnx
        return import_onnx(model)
    from .. import models
    from ..frontends.torch import import_torch
    module, inputs = models.get(model, batch)
    return import_torch(module, inputs)


def _cmd_explain(args: argparse.Namespace) -> int:
    """Op counts, weights and peak planned memory of MODEL before and after the graph pipeline
    (after every pass with --passes)."""
    from ..passes.pipeline import ModuleStats, default_pipeline, trace_pipeline
    from ..ir.pass_manager import PassManager

    t0 = time.perf_counter()
    module = _explain_load(args.model, args.batch)
    load_s = time.perf_counter() - t0
    pm = PassManager.parse(args.pipeline) if args.pipeline else default_pipeline(layout=args.layout)
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
    import os
    from ..passes.fusion.explain import explain_fusion, write_picture

    t0 = time.perf_counter()
    report = explain_fusion(module, pipeline=args.fusion_pipeline)
    print()
    print(f"fusion    {args.fusion_pipeline} ({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    print(report.text())
    stem = os.path.splitext(os.path.basename(args.model))[0]
    out = write_picture(report.log, args.output or f"{stem}.fusion.svg", title=stem)
    print(f"\npicture   {out}")


def register(sub) -> None:
    e = sub.add_parser("explain", help="op counts and peak memory before/after the graph optimiser")
    e.add_argument("model", help="a zoo model name (tensorforge zoo) or a path to an .onnx file")
    e.add_argument("--passes", action="store_true", help="a row after every pass of the pipeline")
    e.add_argument("--pipeline", default=None, help="a pipeline to run instead of the default one")
    e.add_argument("--layout", action="store_true", help="include the (experimental) layout pass")
    e.add_argument("--batch", type=int, default=None, help="batch size for zoo models")
    e.add_argument("--fusion", action="store_true",
                   help="also fuse the optimised graph: groups, every decision with its reason, a picture")
    e.add_argument("--fusion-pipeline", default="fuse", help="fusion passes for --fusion (default: fuse)")
    e.add_argument("--output", default=None,
                   help="picture for --fusion (.svg/.png via Graphviz, .dot; default MODEL.fusion.svg)")
    e.set_defaults(fn=_cmd_explain)
