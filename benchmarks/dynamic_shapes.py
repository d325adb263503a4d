"""Compile once, run every size: dynamic builds against static builds and torch eager.

    .venv/bin/python benchmarks/dynamic_shapes.py                        # resnet18 + bert_base sweeps
    .venv/bin/python benchmarks/dynamic_shapes.py --only resnet18 --batches 1,3,8
    .venv/bin/python benchmarks/dynamic_shapes.py --only bert_base --seqs 1,7,128 --repeats 5

For each model the dynamic build is compiled once (``tensorforge.compile(model, example_inputs,
dynamic_shapes=...)``: ResNet-18 with batch in 1..64, BERT-base with batch in 1..64 and sequence in
1..512), then the sweep runs it at every (batch, seq) of the grid and, for each point:

- ``err``: max |tf - torch| / max |torch| over every output, against torch eager on the same inputs;
- ``dyn ms`` / ``static ms``: medians of interleaved calls (dynamic, static, dynamic, ...) after
  warm-up, where ``static`` is a build specialised to exactly that shape (compiled outside the
  sweep's compiler count);
- ``dyn/static``: the median of the per-round ratios (1.0: no cost for being dynamic).

``sweep compiler runs`` counts the C compiler runs while the dynamic model ran the whole grid
(the promise: zero).  The summary gives the geometric mean and the worst dyn/static ratio.
The machine is shared and noisy: compare ratios within one run.  A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from tensorforge.benchmark.stats import max_rel_err_all, ratio_stats


def _flat(x) -> list:
    if isinstance(x, dict):
        return [t for v in x.values() for t in _flat(v)]
    if isinstance(x, (tuple, list)):
        return [t for v in x for t in _flat(v)]
    return [x]


def _inputs(name: str, batch: int, seq: int | None):
    import torch

    from tensorforge import models
    from tensorforge.models import bert

    if name == "bert_base":
        g = torch.Generator().manual_seed(batch * 1000 + seq)
        return (bert.token_inputs(batch, g, bert.BASE.vocab, seq), bert.padding_mask(batch, g, seq))
    return models.get(name, batch=batch)[1]


def _dynamic_spec(name: str):
    from torch.export import Dim

    batch = Dim("batch", min=1, max=64)
    if name == "bert_base":
        seq = Dim("seq", min=1, max=512)
        return ({0: batch, 1: seq}, {0: batch, 1: seq})
    return ({0: batch},)


def sweep(name: str, points: list[tuple[int, int | None]], args) -> dict:
    import torch

    import tensorforge
    from tensorforge import models
    from tensorforge.benchmark import time_interleaved
    from tensorforge.codegen.c import toolchain

    module, _ = models.get(name)
    example = _inputs(name, 4 if name == "bert_base" else 8, 128 if name == "bert_base" else None)   # the hints
    t0 = time.perf_counter()
    dyn = tensorforge.compile(module, example, dynamic_shapes=_dynamic_spec(name), threads=args.threads)
    build_s = time.perf_counter() - t0
    print(f"{name}: dynamic build {build_s:.1f} s; inputs {dyn.describe() if hasattr(dyn, 'describe') else ''}",
          flush=True)
    rows, sweep_runs = [], 0
    for batch, seq in points:
        inputs = _inputs(name, batch, seq)
        np_inputs = [x.numpy() for x in inputs]
        with torch.no_grad():
            ref = [t.numpy() for t in _flat(module(*inputs))]
        runs = toolchain.stats.compiler_runs
        out = [np.asarray(o) for o in _flat(dyn(*np_inputs))]
        sweep_runs += toolchain.stats.compiler_runs - runs
        err = max_rel_err_all(out, ref)
        static = tensorforge.compile(module, inputs, threads=args.threads)
        runs = toolchain.stats.compiler_runs
        t = time_interleaved({"dyn": lambda: dyn(*np_inputs), "static": lambda: static(*np_inputs)},
                             repeats=args.repeats, warmup=1, budget_s=args.budget_s)
        sweep_runs += toolchain.stats.compiler_runs - runs
        ratio, spread = ratio_stats(t["dyn"].samples, t["static"].samples)
        row = {"batch": batch, "seq": seq, "err": err, "dyn_ms": t["dyn"].median_ms,
               "static_ms": t["static"].median_ms, "dyn_over_static": ratio, "spread": spread,
               "load": os.getloadavg()[0]}
        rows.append(row)
        print(f"  batch {batch:3d} seq {seq if seq is not None else '-':>4}  err {err:.1e}  "
              f"dyn {row['dyn_ms']:9.2f} ms  static {row['static_ms']:9.2f} ms  dyn/static {ratio:5.3f} "
              f"(+-{spread:.2f})  load {row['load']:.1f}", flush=True)
    ratios = [r["dyn_over_static"] for r in rows]
    summary = {"model": name, "build_s": build_s, "sweep_compiler_runs": sweep_runs,
               "geomean_dyn_over_static": math.exp(sum(math.log(r) for r in ratios) / len(ratios)),
               "worst_dyn_over_static": max(ratios), "max_err": max(r["err"] for r in rows), "rows": rows}
    print(f"{name}: sweep compiler runs {sweep_runs}; dyn/static geomean {summary['geomean_dyn_over_static']:.3f}, "
          f"worst {summary['worst_dyn_over_static']:.3f}; max err {summary['max_err']:.1e}", flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default="resnet18,bert_base")
    p.add_argument("--batches", default="1,3,8,17,64")
    p.add_argument("--seqs", default="1,7,128,384")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget-s", type=float, default=20.0, help="timing budget per grid point")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    seqs = [int(s) for s in args.seqs.split(",")]
    results = []
    for name in args.only.split(","):
        points = [(b, s) for b in batches for s in seqs] if name == "bert_base" else [(b, None) for b in batches]
        results.append(sweep(name, points, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
