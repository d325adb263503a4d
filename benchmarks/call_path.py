"""The cost of the Python call path of a native model (issue 15, item 5).

1. A memory-bound model, ``x + GELU(LayerNorm(x))`` on a (64, 512, 768) float32 tensor (~100 MB
   in, ~100 MB out), compiled with ``tensorforge.compile`` from a torch module, timed three ways,
   interleaved (medians): ``cm(x)`` with torch tensors in and out (the outputs come from the
   model's output pool), ``cm.run(x, out=[y])`` into a caller-owned tensor, and torch eager.  Each
   is reported in GB/s of bytes moved (read x + write y; the residual is x itself) against the
   copy bandwidth measured in the same run (``np.copyto`` of the same bytes, same threads).
2. The per-call overhead of the MLP (``tensorforge.models`` ``mlp``, batch 1) through ``cm(x)``
   over ``tf_run`` called from a C loop (``tensorforge.runtime.overhead``), on 1 thread and on the
   model's default thread count (the latter includes waking the OpenMP team, in both); on one
   thread also in the calling thread's CPU time, which leaves out the time other processes hold
   the core (a loaded machine), though not their pressure on shared caches and cores.  And the
   Python call path alone: ``tf_run`` swapped for an empty C function (``measure_python_path``),
   which leaves out the kernels and what interleaving Python with them costs in caches (the
   MLP's 7.4 MB of weights nearly fill an 8 MB L3: the C loop keeps them hotter than any caller).

The machine may be shared: the load average is printed before and after.

    .venv/bin/python benchmarks/call_path.py [--repeats 15] [--threads N] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

SHAPE = (64, 512, 768)
NAMES = ("cm(x)", "cm(x) no pool", "run(out=)", "torch eager")


def _copy_seconds(dst: np.ndarray, src: np.ndarray, threads: int, pool) -> float:
    n = src.size
    bounds = np.linspace(0, n, threads + 1).astype(int)
    d, s = dst.reshape(-1), src.reshape(-1)
    chunks = [(d[lo:hi], s[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]
    t0 = time.perf_counter()
    if threads == 1:
        np.copyto(*chunks[0])
    else:
        list(pool.map(lambda c: np.copyto(*c), chunks))
    return time.perf_counter() - t0


def bench_layernorm(args) -> dict:
    import torch
    from concurrent.futures import ThreadPoolExecutor

    import tensorforge
    from tensorforge.benchmark import time_interleaved

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = torch.nn.LayerNorm(SHAPE[-1])

        def forward(self, x):
            return x + torch.nn.functional.gelu(self.ln(x))

    torch.manual_seed(0)
    module = Block().eval()
    x = torch.randn(*SHAPE)
    cm = tensorforge.compile(module, (x,), threads=args.threads)
    fresh = tensorforge.compile(module, (x,), threads=args.threads)    # the call path before the pool:
    fresh.native.set_output_pool(0)                                   # new outputs on every call
    threads = cm.threads
    torch.set_num_threads(threads)
    with torch.no_grad():
        ref = module(x)
    y = cm(x)
    err = float((y - ref).abs().max())
    assert isinstance(y, torch.Tensor) and err < 1e-3, err
    del y
    out = torch.empty(SHAPE)
    src_np, dst_np = x.numpy(), np.empty(SHAPE, np.float32)
    dst_np.fill(0)
    pool = ThreadPoolExecutor(threads)

    def eager():
        with torch.no_grad():
            module(x)

    copy_samples: list[float] = []
    contenders = {
        "cm(x)": lambda: cm(x),
        "cm(x) no pool": lambda: fresh(x),
        "run(out=)": lambda: cm.run(x, out=[out]),
        "torch eager": eager,
        "copy": lambda: copy_samples.append(_copy_seconds(dst_np, src_np, threads, pool)),
    }
    t = time_interleaved(contenders, repeats=args.repeats, warmup=2)
    pool.shutdown()
    nbytes = 2 * x.numel() * x.element_size()          # read x, write y
    copy_s = statistics.median(t["copy"].samples)
    row = {"shape": list(SHAPE), "threads": threads, "bytes": nbytes, "max_abs_err": err,
           "copy_gbs": nbytes / copy_s / 1e9}
    row["pool_reused"], row["pool_made"] = cm.native.output_pool.reused, cm.native.output_pool.made
    for name in NAMES:
        med = statistics.median(t[name].samples)
        row[name] = {"median_ms": med * 1e3, "min_ms": min(t[name].samples) * 1e3, "gbs": nbytes / med / 1e9,
                     "of_copy": copy_s / med}
    return row


def bench_mlp_overhead(args) -> dict:
    import tensorforge
    from tensorforge import models
    from tensorforge.runtime.overhead import measure_call_overhead, measure_python_path

    module, inputs = models.get("mlp", batch=1)
    cm = tensorforge.compile(module, inputs, threads=args.threads)
    np_inputs = [x.numpy() for x in inputs]
    rows = {}
    default = cm.threads
    for threads in sorted({1, default}):
        cm.set_threads(threads)
        for kind, call_inputs, cpu in (("numpy", np_inputs, False), ("torch", list(inputs), False),
                                       ("numpy, CPU time", np_inputs, True), ("torch, CPU time", list(inputs), True)):
            if cpu and threads > 1:
                continue              # the caller's CPU time leaves out the other threads' share
            o = measure_call_overhead(cm.native, call_inputs, lambda: cm(*call_inputs), blocks=21,
                                      calls_per_block=200, cpu_time=cpu)
            rows[f"{threads} thread(s), {kind}"] = {
                "overhead_us": o.overhead_us, "overhead_min_us": o.overhead_min_us, "iqr_us": o.spread_us,
                "c_loop_us": o.c_loop_us, "python_us": o.python_us}
    cm.set_threads(default)
    # the Python call path alone: tf_run swapped for an empty function (no kernels, no cache effects)
    cm.set_threads(1)
    out = [np.empty(tuple(cm.native.outputs[0].shape), np.float32)]
    for label, call in (("cm(x) numpy", lambda: cm(*np_inputs)), ("cm(x) torch", lambda: cm(*inputs)),
                        ("run(out=) numpy", lambda: cm.run(*np_inputs, out=out)),
                        ("native fn only", lambda: cm.native.fn(*cm.native._call_args))):
        med, best = measure_python_path(cm.native, call)
        rows[f"python path, {label}"] = {"python_us": med, "python_min_us": best}
    cm.set_threads(default)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=None, help="model threads (default: all cores)")
    p.add_argument("--json", default=None)
    p.add_argument("--skip-mlp", action="store_true")
    p.add_argument("--skip-layernorm", action="store_true")
    args = p.parse_args(argv)
    result = {"load_before": os.getloadavg()}
    if not args.skip_layernorm:
        row = result["layernorm_gelu_residual"] = bench_layernorm(args)
        print(f"x + gelu(layernorm(x)) {row['shape']} f32, {row['threads']} thread(s), "
              f"{row['bytes'] / 1e6:.0f} MB moved; copy {row['copy_gbs']:.2f} GB/s")
        for name in NAMES:
            r = row[name]
            print(f"  {name:12s} median {r['median_ms']:7.2f} ms (min {r['min_ms']:7.2f})  {r['gbs']:6.2f} GB/s  "
                  f"{100 * r['of_copy']:5.1f}% of copy")
    if not args.skip_mlp:
        rows = result["mlp_batch1_overhead"] = bench_mlp_overhead(args)
        print("mlp batch 1: cm(x) over tf_run in a C loop")
        for name, r in rows.items():
            if "overhead_us" not in r:
                print(f"  {name:32s} {r['python_us']:5.2f} us per call (fastest {r['python_min_us']:5.2f}), thread CPU "
                      f"time, kernels swapped for an empty function")
                continue
            print(f"  {name:32s} overhead median {r['overhead_us']:5.2f} us (IQR {r['iqr_us']:.2f}, fastest blocks "
                  f"{r['overhead_min_us']:5.2f})  on top of {r['c_loop_us']:.1f} us")
    result["load_after"] = os.getloadavg()
    print(f"load average before {result['load_before'][0]:.2f}, after {result['load_after'][0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
