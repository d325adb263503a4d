"""Untuned native tensorforge against torch eager on the full-size zoo, plus one 1024^3 GEMM vs BLAS.

    .venv/bin/python benchmarks/zoo_native.py                       # every model, 2 threads
    .venv/bin/python benchmarks/zoo_native.py --only mlp,resnet18 --repeats 30 --json out.json
    .venv/bin/python benchmarks/zoo_native.py --warm-cache          # reuse ~/.cache/tensorforge

For each zoo model (batch 1; also batch 8 for resnet18 and 64 for mlp) the table gives:

- ``import s``: the frontend (torch.export and conversion to the graph dialect),
- ``build s``: ``tensorforge.compile`` of the imported graph (lowering, C generation, the C
  compiler, loading); by default the compile cache starts empty, so the compiler runs;
  ``rebuild s``: the same compile again, which must hit the cache (``cc`` counts compiler runs),
- ``tf ms`` / ``torch ms``: medians of interleaved calls after warm-up
  (``tensorforge.benchmark.time_interleaved``: tf, torch, tf, torch, ...), NumPy in for
  tensorforge, torch in (``no_grad``) for torch eager, both on ``--threads`` threads,
- ``ratio``: median over rounds of torch/tf within a round (>1: tensorforge is faster),
- ``noise``: interquartile range over median of the per-round ratios,
- ``GFLOP/s``: the graph's flops (sum of every op's ``opdef.cost``) over the tf median,
- ``err``: max |tf - torch| / max |torch| on the first output.

Then the GEMM: ``C = A @ B`` for 1024^3 fp32 as a one-matmul graph compiled by
``tensorforge.compile`` (both operands inputs, output written into a reused buffer) against
``np.matmul(A, B, out=C)`` (NumPy's BLAS) in the same process, interleaved; and the Python call
overhead of the MLPs at batch 1 (``tensorforge.runtime.overhead``).  The machine is shared and
noisy: compare ratios from one run, not absolute times across runs; the load average is
recorded with each row.  This is a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from tensorforge.benchmark.stats import max_rel_err, quartile_spread, ratio_stats
from tensorforge.benchmark.work import graph_flops

CONFIGS = [("mlp", 1), ("mlp", 64), ("resnet18", 1), ("resnet18", 8), ("mobilenet_v2", 1),
           ("efficientnet_b0", 1), ("resnet50", 1), ("bert_base", 1), ("gpt2_small", 1)]


def _first(x):
    if isinstance(x, dict):
        x = next(iter(x.values()))
    while isinstance(x, (tuple, list)):
        x = x[0]
    return x


def bench_model(name: str, batch: int, args) -> dict:
    import torch

    import tensorforge
    from tensorforge import models
    from tensorforge.benchmark import time_interleaved
    from tensorforge.codegen.c import toolchain

    row: dict = {"model": name, "batch": batch, "load_before": os.getloadavg()[0]}
    module, inputs = models.get(name, batch=batch)
    t0 = time.perf_counter()
    graph = tensorforge.import_model(module, inputs)
    row["import_s"] = time.perf_counter() - t0
    row["gflop"] = graph_flops(graph) / 1e9
    runs = toolchain.stats.compiler_runs
    t0 = time.perf_counter()
    cm = tensorforge.compile(graph, threads=args.threads)
    row["build_s"] = time.perf_counter() - t0
    row["compiler_runs"] = toolchain.stats.compiler_runs - runs
    runs = toolchain.stats.compiler_runs
    t0 = time.perf_counter()
    tensorforge.compile(graph, threads=args.threads)
    row["rebuild_s"] = time.perf_counter() - t0
    row["rebuild_compiler_runs"] = toolchain.stats.compiler_runs - runs
    row["kernels"] = cm.native.build.get("kernels")
    row["unique_kernels"] = cm.native.build.get("unique_kernels")

    np_inputs = [x.numpy() for x in inputs]
    with torch.no_grad():
        ref = _first(module(*inputs)).numpy()
    row["max_rel_err"] = max_rel_err(_first(cm(*np_inputs)), ref)

    def run_torch():
        with torch.no_grad():
            module(*inputs)

    t = time_interleaved({"tf": lambda: cm(*np_inputs), "torch": run_torch},
                         repeats=args.repeats, warmup=args.warmup, budget_s=args.budget_s)
    tf_s, torch_s = t["tf"].samples, t["torch"].samples
    row.update(tf_ms=t["tf"].median_ms, torch_ms=t["torch"].median_ms, rounds=len(tf_s),
               tf_spread=quartile_spread(tf_s), torch_spread=quartile_spread(torch_s))
    row["ratio"], row["ratio_spread"] = ratio_stats(torch_s, tf_s)
    row["gflops"] = row["gflop"] / (row["tf_ms"] / 1e3)
    row["torch_gflops"] = row["gflop"] / (row["torch_ms"] / 1e3)
    row["load_after"] = os.getloadavg()[0]
    if name == "mlp" and batch == 1:
        row.update(_call_overhead(cm, np_inputs))
    return row


def _call_overhead(cm, np_inputs) -> dict:
    """Python call cost of ``cm(*inputs)`` over ``tf_run`` in a C loop, on one thread (so that
    OpenMP barriers under other tenants' load do not drown a few microseconds)."""
    from tensorforge.runtime.overhead import measure_call_overhead
    threads = cm.threads
    cm.set_threads(1)
    try:
        o = measure_call_overhead(cm.native, np_inputs, lambda: cm(*np_inputs), blocks=21, calls_per_block=100)
    finally:
        cm.set_threads(threads)
    return {"call_overhead_us": o.overhead_us, "call_overhead_iqr_us": o.spread_us,
            "call_overhead_min_us": o.overhead_min_us, "c_loop_us": o.c_loop_us}


def bench_gemm(args, n: int = 1024) -> dict:
    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.types import tensor

    m = ModuleOp.create()
    f = m.add_function("main", [tensor((n, n)), tensor((n, n))], arg_names=["a", "b"])
    f.set_return([f.builder().graph.matmul(f.args[0], f.args[1])])
    t0 = time.perf_counter()
    cm = tensorforge.compile(m, threads=args.threads)
    build_s = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    c_tf, c_np = np.empty((n, n), np.float32), np.empty((n, n), np.float32)
    cm.run(a, b, out=[c_tf])
    np.matmul(a, b, out=c_np)
    err = max_rel_err(c_tf, c_np)
    t = time_interleaved({"tf": lambda: cm.run(a, b, out=[c_tf]), "numpy": lambda: np.matmul(a, b, out=c_np)},
                         repeats=args.repeats, warmup=args.warmup, budget_s=args.budget_s)
    flops = 2.0 * n ** 3
    ratio, spread = ratio_stats(t["numpy"].samples, t["tf"].samples)
    return {"n": n, "build_s": build_s, "max_rel_err": err, "tf_ms": t["tf"].median_ms,
            "numpy_ms": t["numpy"].median_ms, "tf_gflops": flops / t["tf"].median_ms / 1e6,
            "numpy_gflops": flops / t["numpy"].median_ms / 1e6, "ratio": ratio, "ratio_spread": spread,
            "rounds": len(t["tf"].samples), "load": os.getloadavg()[0]}


def print_table(rows: list[dict], gemm: dict | None) -> None:
    head = (f"{'model':<13}{'batch':>5} {'import s':>8} {'build s':>8} {'cc':>3} {'rebuild s':>9} {'cc':>3} "
            f"{'tf ms':>9} {'torch ms':>9} {'ratio':>6} {'noise':>6} {'GFLOP/s':>8} {'torch':>7} {'err':>8} "
            f"{'load':>5}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<13}{r['batch']:>5} FAILED: {r['error']}")
            continue
        print(f"{r['model']:<13}{r['batch']:>5} {r['import_s']:>8.1f} {r['build_s']:>8.1f} "
              f"{r['compiler_runs']:>3} {r['rebuild_s']:>9.1f} {r['rebuild_compiler_runs']:>3} "
              f"{r['tf_ms']:>9.2f} {r['torch_ms']:>9.2f} {r['ratio']:>6.2f} {r['ratio_spread']:>6.0%} "
              f"{r['gflops']:>8.1f} {r['torch_gflops']:>7.1f} {r['max_rel_err']:>8.1e} {r['load_after']:>5.1f}")
    for r in rows:
        if "call_overhead_us" in r:
            print(f"\nPython call overhead, {r['model']} batch {r['batch']}, 1 thread: median "
                  f"{r['call_overhead_us']:.1f} us (IQR {r['call_overhead_iqr_us']:.1f} us), fastest blocks "
                  f"{r['call_overhead_min_us']:.1f} us, on top of {r['c_loop_us']:.1f} us for tf_run in a C loop")
    if gemm:
        print(f"\nGEMM {gemm['n']}^3 fp32: tensorforge {gemm['tf_ms']:.2f} ms ({gemm['tf_gflops']:.1f} GFLOP/s), "
              f"numpy BLAS {gemm['numpy_ms']:.2f} ms ({gemm['numpy_gflops']:.1f} GFLOP/s), "
              f"numpy/tf time ratio {gemm['ratio']:.2f} (noise {gemm['ratio_spread']:.0%}), "
              f"err {gemm['max_rel_err']:.1e}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated model names (default: all)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=60.0, help="timing budget per model")
    p.add_argument("--no-gemm", action="store_true")
    p.add_argument("--warm-cache", action="store_true", help="keep $TENSORFORGE_CACHE (default: a fresh one)")
    p.add_argument("--json", default="build/zoo_native.json")
    args = p.parse_args(argv)
    if not args.warm_cache:
        os.environ["TENSORFORGE_CACHE"] = tempfile.mkdtemp(prefix="tf-zoo-cache-")
    import torch
    torch.set_num_threads(args.threads)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    rows = []
    for name, batch in CONFIGS:
        if only and name not in only:
            continue
        print(f"{name} batch {batch} ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench_model(name, batch, args))
        except Exception as exc:  # a benchmark keeps going and reports the failure
            rows.append({"model": name, "batch": batch, "error": f"{type(exc).__name__}: {exc}"[:300]})
    gemm = None if args.no_gemm else bench_gemm(args)
    print_table(rows, gemm)
    info = {"threads": args.threads, "repeats": args.repeats, "warmup": args.warmup,
            "cpus": len(os.sched_getaffinity(0)), "torch": torch.__version__, "numpy": np.__version__,
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"info": info, "models": rows, "gemm": gemm}, f, indent=1)
    print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
