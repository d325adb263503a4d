"""Tune ResNet-50's 3x3 convolution (1x64x56x56, 64 filters, pad 1, bias) and time it against
torch's ``F.conv2d`` in the same process.

    .venv/bin/python benchmarks/tune_conv.py                        # 64 trials, 3 min budget, fresh db
    .venv/bin/python benchmarks/tune_conv.py --db c.sqlite --trials 128

The conv is compiled as a one-layer model (the tensorizer's implicit-GEMM convolution), tuned with
``tensorforge.tune`` (whose confirmation keeps the default unless a candidate beat it re-timed
side by side), then the tuned build, the untuned build and ``F.conv2d`` (torch set to the same
thread count) are timed in alternating blocks with pauses (``tune_timing.py``).  The machine is shared: compare the
ratios of one run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--time-budget", type=float, default=180.0)
    ap.add_argument("--db", help="tuning database (default: a fresh temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the result as JSON")
    args = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as F

    import tensorforge
    from tune_timing import time_blocks
    from tensorforge.tune.tasks import extract_tasks

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1).eval()
    x = torch.randn(1, 64, 56, 56)
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="tune-conv-"), "tune.sqlite")
    tasks = [t for t in extract_tasks(conv, (x,)) if t.kind == "conv"]
    t0 = time.perf_counter()
    report = tensorforge.tune(tasks, trials=args.trials, db=db, timeout_s=args.time_budget)
    tune_s = time.perf_counter() - t0
    tuned = tensorforge.compile(conv, (x,), db=db, threads=args.threads)
    untuned = tensorforge.compile(conv, (x,), db=None, threads=args.threads)
    xn = x.numpy()
    with torch.no_grad():
        ref = F.conv2d(x, conv.weight, conv.bias, padding=1).numpy()
    outs = {k: np.empty_like(ref) for k in ("tuned", "default")}
    errs = {}
    for k, cm in (("tuned", tuned), ("default", untuned)):
        cm.run(xn, out=[outs[k]])
        errs[k] = float(np.abs(outs[k] - ref).max() / np.abs(ref).max())
    w, b = conv.weight.detach(), conv.bias.detach()

    def torch_conv():
        with torch.no_grad():
            return F.conv2d(x, w, b, padding=1)

    blocks = time_blocks({"F.conv2d": torch_conv,
                          "tuned": lambda: tuned.run(xn, out=[outs["tuned"]]),
                          "default": lambda: untuned.run(xn, out=[outs["default"]])}, rounds=args.rounds, reps=20)
    flop = 2.0 * 64 * 64 * 9 * 56 * 56
    med = {k: statistics.median(v) for k, v in blocks.items()}
    task = report.tasks[0]
    result = {"trials": report.trials, "records": task.records, "tune_s": tune_s, "stopped": report.stopped,
              "best_config": task.best_config, "rel_err": errs, "tuned_kernels": tuned.native.build["tuned_kernels"],
              "ms": {k: v * 1e3 for k, v in med.items()}, "gflops": {k: flop / v / 1e9 for k, v in med.items()},
              "torch_over_tuned": med["F.conv2d"] / med["tuned"], "torch_over_default": med["F.conv2d"] / med["default"],
              "default_over_tuned": med["default"] / med["tuned"], "decision": task.decision,
              "threads": args.threads, "db": db}
    print(f"\nResNet-50 3x3 conv 1x64x56x56 -> 64, pad 1, {args.threads} threads; tuning: {report.trials} trials "
          f"this run ({task.records} in the db) in {tune_s:.1f} s{' (' + report.stopped + ')' if report.stopped else ''}")
    print(f"applied config: {json.dumps(task.best_config)}")
    print(f"confirmation (tuner, default vs best candidates in one runner): {task.decision}"
          f"{' (confirmed this run)' if task.confirmed_now else ' (from the db)'}; in process: default time / "
          f"tuned time {result['default_over_tuned']:.3f}")
    for k in ("F.conv2d", "tuned", "default"):
        print(f"{k:10s} {result['ms'][k]:8.3f} ms {result['gflops'][k]:8.1f} GFLOP/s")
    print(f"F.conv2d time / tuned time: {result['torch_over_tuned']:.3f} (>= 1: tuned at least as fast); "
          f"untuned: {result['torch_over_default']:.3f}; rel err tuned {errs['tuned']:.1e}")
    print("(shared 2-core machine: compare ratios within one run)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
