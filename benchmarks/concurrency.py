"""Several Python threads serving one compiled model: identical results, flat memory, throughput.

    .venv/bin/python benchmarks/concurrency.py                          # resnet18_small, the issue's numbers
    .venv/bin/python benchmarks/concurrency.py --model mlp --callers 4 --calls 500 --json out.json

The model is a zoo model (default ``resnet18_small``: a small CNN at batch 1, about 2 ms a call on
one core, so the Python part of a call is a few percent of it; the kernels run inside a
``ctypes.CDLL`` call, which releases the GIL) compiled once with ``threads=1``: each call runs on
one OpenMP thread, and the model's arena pool lets ``cores / 1`` calls run at once.

1. ``--callers`` threads (default 4) make ``--calls`` calls each (default 2,500) on the one model
   object, each with its own random input (seeded by thread and call).  Every output is compared
   bitwise with a serial call on the same input afterwards.  VmRSS (``/proc/self/status``) is read
   after the first 100 calls of the run and at its end: the promise is that the end is within 5%
   (the pool is bounded; outputs are freed; the kept results add a few hundred KiB).
2. Throughput of one caller against two callers (``threads=1`` each), measured in alternating
   blocks (1, 2, 1, 2, ...) of ``--block-calls`` calls per caller, so a slow spell of the shared
   machine hits both; the medians of the block throughputs are compared (and the median of the
   per-pair ratios).  The promise on a 2-core machine: at least 1.6x.  A control runs in the same
   rounds: SHA-256 of 1 MiB per call (C that releases the GIL, no tensorforge), whose 2-thread
   speedup is what the machine gives two threads at that moment; on a machine other processes
   keep busy it is well below 2x and caps the model's.  ``cpu/wall`` is the process CPU time
   per wall second in the 1- and 2-caller blocks (1.0 and 2.0: the callers ran all the time; less
   is time the machine gave to other processes: Linux's autogroup shares the cores between
   sessions, so on a busy machine two threads of one process get no more CPU than one).
   ``per CPU-s`` compares calls per CPU second of two callers with one (1.0: running side by side
   costs a call nothing extra: no lock convoy, no cache or bandwidth fight); it does not depend on
   how much CPU the machine gives, and 2 x it is what two callers reach on two idle cores.

A benchmark, not a test: it prints the numbers and whether each promise held; exit status 1 only
when results differ from the serial ones.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import threading
import time

import numpy as np


def rss_bytes() -> int:
    """This process's resident memory (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def compile_model(name: str, batch: int):
    """The zoo model compiled for one OpenMP thread per call, and its example inputs as NumPy."""
    import tensorforge
    from tensorforge import models

    module, inputs = models.get(name, batch=batch)
    cm = tensorforge.compile(module, inputs, threads=1)
    return cm, [t.numpy() for t in inputs]


def random_inputs(examples: list[np.ndarray], caller: int, call: int) -> list[np.ndarray]:
    """Inputs shaped like ``examples``, random and reproducible from (caller, call)."""
    rng = np.random.default_rng([caller, call])
    out = []
    for x in examples:
        if np.issubdtype(x.dtype, np.floating):
            out.append(rng.standard_normal(x.shape).astype(x.dtype))
        else:                                   # token ids and masks: stay within the example's values
            out.append(rng.integers(int(x.min()), int(x.max()) + 1, size=x.shape).astype(x.dtype))
    return out


def in_threads(n: int, work) -> tuple[float, float]:
    """Runs ``work(k)`` in ``n`` threads released together; (wall seconds until the last one
    ends, process CPU seconds meanwhile)."""
    start, errors = threading.Barrier(n + 1), []

    def body(k):
        start.wait()
        try:
            work(k)
        except BaseException as e:              # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    start.wait()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.join()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if errors:
        raise errors[0]
    return elapsed, cpu


def serve_and_check(cm, examples: list[np.ndarray], callers: int, calls: int) -> dict:
    """Part 1: ``callers`` x ``calls`` concurrent calls, RSS after 100 calls and at the end, and
    the bitwise comparison with serial calls of the same inputs."""
    results = [[None] * calls for _ in range(callers)]
    done, rss_early, lock = [0], [0], threading.Lock()

    def work(k):
        for i in range(calls):
            results[k][i] = cm(*random_inputs(examples, k, i))
            with lock:
                done[0] += 1
                if done[0] == 100:
                    rss_early[0] = rss_bytes()

    seconds, _ = in_threads(callers, work)
    rss_end = rss_bytes()
    mismatches = sum(not np.array_equal(results[k][i], cm(*random_inputs(examples, k, i)))
                     for k in range(callers) for i in range(calls))
    return {"callers": callers, "calls_per_caller": calls, "seconds": seconds, "mismatches": mismatches,
            "rss_after_100_calls": rss_early[0], "rss_at_end": rss_end,
            "rss_growth": rss_end / rss_early[0] - 1, "arenas": len(cm.native.arenas),
            "max_concurrency": cm.native.max_concurrency}


def throughput(cm, examples: list[np.ndarray], blocks: int, block_calls: int) -> dict:
    """Part 2: calls per second of one caller and of two, in alternating blocks, for the model
    and for the control (same rounds)."""
    inputs = [random_inputs(examples, 99, i) for i in range(16)]
    data = np.random.default_rng(0).bytes(1 << 20)

    def model(_):
        for i in range(block_calls):
            cm(*inputs[i % len(inputs)])

    def control(_):
        for _ in range(block_calls):
            hashlib.sha256(data)                # releases the GIL for inputs over 2 KiB

    workloads = {"model": model, "control": control}
    for work in workloads.values():             # warm-up: both arenas made, caches warm
        in_threads(2, work)
    rounds = {name: {"one": [], "two": [], "cpu_one": [], "cpu_two": []} for name in workloads}
    for _ in range(blocks):
        for name, work in workloads.items():
            r = rounds[name]
            for callers, key in ((1, "one"), (2, "two")):
                seconds, cpu = in_threads(callers, work)
                r[key].append(callers * block_calls / seconds)
                r["cpu_" + key].append(cpu / seconds)
    return {"blocks": blocks, "block_calls": block_calls,
            **{name: {**r, "speedup_of_medians": statistics.median(r["two"]) / statistics.median(r["one"]),
                      "speedup_median_of_pairs": statistics.median(b / a for a, b in zip(r["one"], r["two"])),
                      "per_cpu_second_ratio": statistics.median(
                          (b / cb) / (a / ca) for a, b, ca, cb in zip(r["one"], r["two"], r["cpu_one"], r["cpu_two"]))}
               for name, r in rounds.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet18_small", help="a tensorforge.models name")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--callers", type=int, default=4)
    ap.add_argument("--calls", type=int, default=2500, help="calls per caller in part 1")
    ap.add_argument("--blocks", type=int, default=9, help="block pairs in part 2")
    ap.add_argument("--block-calls", type=int, default=150, help="calls per caller in one block of part 2")
    ap.add_argument("--json", help="also write the numbers here")
    args = ap.parse_args(argv)

    from tensorforge.runtime.native import default_threads

    t0 = time.perf_counter()
    cm, examples = compile_model(args.model, args.batch)
    print(f"{args.model} batch {args.batch}: compiled in {time.perf_counter() - t0:.1f} s; "
          f"{default_threads()} cores, threads={cm.threads} per call, max_concurrency={cm.native.max_concurrency}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    part1 = serve_and_check(cm, examples, args.callers, args.calls)
    print(f"{args.callers} threads x {args.calls} calls in {part1['seconds']:.1f} s: {part1['mismatches']} results "
          f"differ from serial calls; {part1['arenas']} arenas; VmRSS {part1['rss_after_100_calls'] / 2**20:.1f} MiB "
          f"after 100 calls, {part1['rss_at_end'] / 2**20:.1f} MiB at the end ({part1['rss_growth']:+.2%}; "
          f"promise within 5%: {'yes' if abs(part1['rss_growth']) <= 0.05 else 'NO'})", flush=True)
    part2 = throughput(cm, examples, args.blocks, args.block_calls)
    print(f"throughput, medians of {args.blocks} alternating blocks of {args.block_calls} calls per caller:")
    for name in ("model", "control"):
        r = part2[name]
        promise = f"; promise >= 1.6x: {'yes' if r['speedup_of_medians'] >= 1.6 else 'NO'}" if name == "model" else ""
        print(f"  {name:8s} 1 caller {statistics.median(r['one']):7.0f} calls/s, 2 callers "
              f"{statistics.median(r['two']):7.0f} calls/s: {r['speedup_of_medians']:.2f}x (median of pair ratios "
              f"{r['speedup_median_of_pairs']:.2f}x; cpu/wall {statistics.median(r['cpu_one']):.2f} and "
              f"{statistics.median(r['cpu_two']):.2f}; per CPU-s {r['per_cpu_second_ratio']:.2f}){promise}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "batch": args.batch, "serve": part1, "throughput": part2}, f, indent=1)
    return 1 if part1["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
