"""The ``tensorforge`` command line.

    tensorforge zoo                 list the built-in models
    tensorforge demo [MODEL ...]    compile zoo models, check them against PyTorch, time both
    tensorforge explain MODEL [--passes]   what the graph optimiser does to a model
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from .errors import TensorforgeError

DEMO_MODELS = ("resnet18", "bert_base")


def _cmd_zoo(args: argparse.Namespace) -> int:
    from . import models
    for name in models.names():
        print(models.describe(name) if hasattr(models, "describe") else name)
    return 0


def _max_rel_err(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


def _demo_one(name: str, repeats: int) -> dict:
    import torch

    from . import compile as tf_compile
    from . import models
    from .benchmark import time_interleaved

    module, inputs = models.get(name)
    t0 = time.perf_counter()
    cm = tf_compile(module, inputs)
    compile_s = time.perf_counter() - t0
    np_inputs = [x.numpy() for x in inputs]
    with torch.no_grad():
        ref = module(*inputs)
    ref = ref[0] if isinstance(ref, (tuple, list)) else ref
    ref = next(iter(ref.values())) if isinstance(ref, dict) else ref
    out = cm(*np_inputs)
    out = out[0] if isinstance(out, tuple) else out
    err = _max_rel_err(out, ref.numpy())

    def run_torch():
        with torch.no_grad():
            module(*inputs)

    t = time_interleaved({"tensorforge": lambda: cm(*np_inputs), "torch eager": run_torch},
                         repeats=repeats, warmup=1, budget_s=60)
    return {"model": name, "compile_s": compile_s, "max_rel_err": err, "target": cm.target,
            "tf_ms": t["tensorforge"].median_ms, "torch_ms": t["torch eager"].median_ms}


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        import torch
        torch.set_num_threads(args.threads)
    except ImportError:
        print("the demo needs PyTorch: pip install 'tensorforge[torch]'", file=sys.stderr)
        return 2
    rows = []
    for name in args.models:
        print(f"compiling {name} ...", flush=True)
        rows.append(_demo_one(name, args.repeats))
    print()
    print(f"{'model':<14} {'target':<8} {'compile s':>9} {'max rel err':>12} {'tensorforge ms':>15} "
          f"{'torch eager ms':>15} {'speedup':>8}")
    ok = True
    for r in rows:
        print(f"{r['model']:<14} {r['target']:<8} {r['compile_s']:>9.2f} {r['max_rel_err']:>12.2e} "
              f"{r['tf_ms']:>15.2f} {r['torch_ms']:>15.2f} {r['torch_ms'] / r['tf_ms']:>7.2f}x")
        ok &= r["max_rel_err"] < 1e-4
    print("\noutputs match PyTorch (max relative error < 1e-4)" if ok else "\nOUTPUT MISMATCH")
    return 0 if ok else 1


def _explain_load(model: str, batch: int | None):
    """A zoo name or an .onnx path, imported into the graph dialect."""
    import os
    if model.endswith(".onnx") or os.path.isfile(model):
        from .frontends.onnx import import_onnx
        return import_onnx(model)
    from . import models
    from .frontends.torch import import_torch
    module, inputs = models.get(model, batch)
    return import_torch(module, inputs)


def _cmd_explain(args: argparse.Namespace) -> int:
    """Op counts, weights and peak planned memory of MODEL before and after the graph pipeline
    (after every pass with --passes)."""
    from .passes.pipeline import ModuleStats, default_pipeline, trace_pipeline
    from .ir.pass_manager import PassManager

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
    from .passes.fusion.explain import explain_fusion, write_picture

    t0 = time.perf_counter()
    report = explain_fusion(module, pipeline=args.fusion_pipeline)
    print()
    print(f"fusion    {args.fusion_pipeline} ({(time.perf_counter() - t0) * 1e3:.0f} ms)")
    print(report.text())
    stem = os.path.splitext(os.path.basename(args.model))[0]
    out = write_picture(report.log, args.output or f"{stem}.fusion.svg", title=stem)
    print(f"\npicture   {out}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tensorforge", description="A deep-learning compiler.")
    sub = p.add_subparsers(dest="command", required=True)
    z = sub.add_parser("zoo", help="list the built-in models")
    z.set_defaults(fn=_cmd_zoo)
    d = sub.add_parser("demo", help="compile zoo models, check against PyTorch and time both")
    d.add_argument("models", nargs="*", default=list(DEMO_MODELS))
    d.add_argument("--repeats", type=int, default=10)
    d.add_argument("--threads", type=int, default=2)
    d.set_defaults(fn=_cmd_demo)
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
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except TensorforgeError as e:
        print(f"tensorforge: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
