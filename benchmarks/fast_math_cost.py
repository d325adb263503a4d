"""What IEEE semantics cost: every zoo model compiled twice, default (IEEE) and ``fast_math=True``.

    .venv/bin/python benchmarks/fast_math_cost.py                     # the whole zoo
    .venv/bin/python benchmarks/fast_math_cost.py --only resnet18,bert_base --blocks 15
    .venv/bin/python benchmarks/fast_math_cost.py --threads 1          # steadier on a busy machine

Both builds go through the public API (``tensorforge.compile(model, inputs, fast_math=...)``,
then ``cm(*inputs)``) and are timed in the same process, interleaved: ``--blocks`` rounds, each
a block of calls of one build then a block of the other (the order alternating), so that a slow
spell of a shared machine hits both.  Reported per model: the median per-call time of each, the
ratio IEEE / fast-math (above 1: IEEE is slower), and whether the two builds' outputs agree
(max relative difference).  A benchmark, not a test.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _block_ms(cm, inputs, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        cm(*inputs)
    return (time.perf_counter() - t0) / calls * 1e3


def _calls_per_block(cm, inputs, target_s: float = 0.2) -> int:
    t0 = time.perf_counter()
    cm(*inputs)
    one = max(time.perf_counter() - t0, 1e-5)
    return max(1, min(200, int(target_s / one)))


def _max_rel_diff(a, b) -> float:
    a = a if isinstance(a, (list, tuple)) else [a]
    b = b if isinstance(b, (list, tuple)) else [b]
    worst = 0.0
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        worst = max(worst, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30)))
    return worst


def run_model(name: str, blocks: int, threads: int | None = None) -> dict:
    import tensorforge
    import tensorforge.models as zoo

    module, inputs = zoo.get(name)
    arrays = [np.ascontiguousarray(t.detach().numpy()) for t in inputs]
    builds = {}
    for mode, fast in (("ieee", False), ("fast_math", True)):
        t0 = time.perf_counter()
        builds[mode] = tensorforge.compile(module, inputs, fast_math=fast,
                                           **({"threads": threads} if threads else {}))
        print(f"  {name}: compiled {mode} in {time.perf_counter() - t0:.1f} s", flush=True)
    outs = {m: cm(*arrays) for m, cm in builds.items()}
    calls = _calls_per_block(builds["ieee"], arrays)
    times: dict[str, list[float]] = {m: [] for m in builds}
    for b in range(blocks):
        order = list(builds) if b % 2 == 0 else list(reversed(builds))
        for m in order:
            times[m].append(_block_ms(builds[m], arrays, calls))
    ieee, fast = statistics.median(times["ieee"]), statistics.median(times["fast_math"])
    row = {"model": name, "ieee_ms": ieee, "fast_math_ms": fast, "ratio": ieee / fast,
           "max_rel_diff": _max_rel_diff(outs["ieee"], outs["fast_math"])}
    print(f"{name:20s} ieee {ieee:9.3f} ms  fast-math {fast:9.3f} ms  ieee/fast {row['ratio']:.3f}  "
          f"outputs differ by {row['max_rel_diff']:.1e} (relative)", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    import tensorforge.models as zoo

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default=",".join(zoo.names()))
    p.add_argument("--blocks", type=int, default=11, help="interleaved rounds per model (default 11)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads per call (default: all cores); 1 is steadier on a loaded machine")
    args = p.parse_args(argv)
    rows = [run_model(n, args.blocks, args.threads) for n in args.only.split(",")]
    print("\n| model | IEEE ms | fast-math ms | IEEE / fast-math |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['ieee_ms']:.3f} | {r['fast_math_ms']:.3f} | {r['ratio']:.3f} |")
    geo = float(np.exp(np.mean(np.log([r["ratio"] for r in rows]))))
    print(f"geomean IEEE / fast-math: {geo:.3f}; worst {max(r['ratio'] for r in rows):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
