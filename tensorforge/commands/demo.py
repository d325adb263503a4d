"""`tensorforge demo`: compile zoo models, check them against PyTorch, time both."""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

DEMO_MODELS = ("resnet18", "bert_base")


def _max_rel_err(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))


def _demo_one(name: str, repeats: int) -> dict:
    import torch

    from .. import compile as tf_compile
    from .. import models
    from ..benchmark import time_interleaved

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


def register(sub) -> None:
    d = sub.add_parser("demo", help="compile zoo models, check against PyTorch and time both")
    d.add_argument("models", nargs="*", default=list(DEMO_MODELS))
    d.add_argument("--repeats", type=int, default=10)
    d.add_argument("--threads", type=int, default=2)
    d.set_defaults(fn=_cmd_demo)
