"""tensorforge against jax.jit (XLA on the CPU) on the pure-JAX models, in the same process.

    .venv/bin/python benchmarks/jax_models.py                        # every model, all cores
    .venv/bin/python benchmarks/jax_models.py --only jax_mlp,jax_cnn --repeats 30 --json out.json
    .venv/bin/python benchmarks/jax_models.py --small                # the CI-sized models only

For each model of ``tensorforge.models.jax_models`` (batch 1, parameters closed over) the table
gives:

- ``tf compile s``: ``tensorforge.compile(fn, example_inputs)``, the public API (jax lowering to
  StableHLO, import, graph passes, C generation and compiler, loading); the compile cache starts
  empty unless ``--warm-cache``;
- ``jit s``: the jax.jit peer's setup (trace, XLA compile, first call), as ``tensorforge bench``
  reports it (``tensorforge.benchmark.peers``);
- ``tf ms`` / ``jax ms``: medians of interleaved turns after warm-up
  (``tensorforge.benchmark.time_interleaved``, each turn a pause, one untimed call and
  ``--block`` timed calls, as ``tensorforge bench`` times); tensorforge is called as a user
  would, ``cm(*inputs)`` with NumPy arrays; jax.jit with the inputs on the device and
  ``block_until_ready`` inside the timed call;
- ``ratio``: median over rounds of jax/tf within a round (>1: tensorforge is faster), and its
  ``noise`` (interquartile range over median);
- ``max abs`` / ``max rel``: max |tf - jax| and that over max |jax|, against jax.jit's output.

XLA sizes its CPU thread pool when JAX starts (all cores), so tensorforge runs on all cores too
unless ``--threads`` says otherwise (then the comparison is not like for like, and the JSON says
so).  The machine is shared and noisy: compare ratios within one run.  A benchmark, not a test;
a model that fails to compile is reported and the others still run.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from tensorforge.benchmark.stats import max_abs_diff_all, max_rel_err_all, quartile_spread, ratio_stats

FULL = ["jax_mlp", "jax_cnn", "jax_transformer", "jax_resnet18"]
SMALL = ["jax_mlp", "jax_cnn", "jax_transformer", "jax_resnet18_small"]


def bench_model(name: str, args) -> dict:
    """Compile, check and time one model against its jax.jit peer; one JSON row."""
    from tensorforge.benchmark import time_interleaved
    from tensorforge.benchmark.peers import make_peer
    from tensorforge.commands.bench import load_jax_model

    row: dict = {"model": name, "load_before": os.getloadavg()[0]}
    lm = load_jax_model(name)
    row["inputs"] = [[list(x.shape), str(x.dtype)] for x in lm.inputs]
    t0 = time.perf_counter()
    cm = lm.compile(threads=args.threads)                 # tensorforge.compile(fn, example_inputs)
    row["tf_compile_s"] = time.perf_counter() - t0
    peer = make_peer("jax", lm, args.threads)
    row["jit_s"] = peer.setup_s
    ours = [np.asarray(o) for o in _flat(cm(*lm.inputs))]
    row["max_abs"] = max_abs_diff_all(ours, peer.outputs)
    row["max_rel"] = max_rel_err_all(ours, peer.outputs)
    inputs = lm.inputs
    t = time_interleaved({"tf": lambda: cm(*inputs), "jax": peer.run}, repeats=args.repeats,
                         warmup=args.warmup, budget_s=args.budget_s, block=args.block, pause_s=args.pause_s)
    tf_s, jax_s = t["tf"].samples, t["jax"].samples
    row.update(tf_ms=t["tf"].median_ms, jax_ms=t["jax"].median_ms, samples=len(tf_s),
               tf_noise=quartile_spread(tf_s), jax_noise=quartile_spread(jax_s))
    row["ratio"], row["ratio_noise"] = ratio_stats(jax_s, tf_s)
    row["load_after"] = os.getloadavg()[0]
    return row


def _flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def print_table(rows: list[dict]) -> None:
    head = (f"{'model':<20}{'tf compile s':>13}{'jit s':>7}{'tf ms':>10}{'jax ms':>10}{'ratio':>7}{'noise':>7}"
            f"{'max abs':>10}{'max rel':>10}{'load':>6}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<20}FAILED: {r['error']}")
            continue
        print(f"{r['model']:<20}{r['tf_compile_s']:>13.1f}{r['jit_s']:>7.1f}{r['tf_ms']:>10.3f}{r['jax_ms']:>10.3f}"
              f"{r['ratio']:>7.2f}{r['ratio_noise']:>7.0%}{r['max_abs']:>10.1e}{r['max_rel']:>10.1e}"
              f"{r['load_after']:>6.1f}")
    print("\nratio = jax.jit median / tensorforge median within each round (>1: tensorforge is faster); "
          "max rel = max |tf - jax| / max |jax|")


def main(argv: list[str] | None = None) -> int:
    cores = len(os.sched_getaffinity(0))
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help="comma-separated model names (default: every full-size model)")
    p.add_argument("--small", action="store_true", help="the small models (jax_resnet18_small for jax_resnet18)")
    p.add_argument("--threads", type=int, default=cores, help=f"tensorforge's threads (default: all {cores})")
    p.add_argument("--repeats", type=int, default=20, help="timed rounds")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--block", type=int, default=3, help="timed calls per contender's turn")
    p.add_argument("--pause-s", type=float, default=0.2, help="pause before each turn (thread pools go idle)")
    p.add_argument("--budget-s", type=float, default=60.0, help="timing budget per model")
    p.add_argument("--warm-cache", action="store_true", help="keep $TENSORFORGE_CACHE (default: a fresh one)")
    p.add_argument("--json", default="build/jax_models.json")
    args = p.parse_args(argv)
    if not args.warm_cache:
        os.environ["TENSORFORGE_CACHE"] = tempfile.mkdtemp(prefix="tf-jax-cache-")
    import jax

    from tensorforge.models import jax_models
    names = [s.strip() for s in args.only.split(",") if s.strip()] or (SMALL if args.small else FULL)
    unknown = sorted(set(names) - set(jax_models.names()))
    if unknown:
        p.error(f"unknown model {', '.join(unknown)} (known: {', '.join(jax_models.names())})")
    rows = []
    for name in names:
        print(f"{name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(bench_model(name, args))
        except Exception as exc:  # a benchmark keeps going and reports the failure
            rows.append({"model": name, "error": f"{type(exc).__name__}: {exc}"[:300]})
    print_table(rows)
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "threads": args.threads,
            "cpus": cores, "xla_threads": "XLA's own pool (all cores unless XLA_FLAGS limits it)",
            "like_for_like_threads": args.threads == cores, "repeats": args.repeats, "warmup": args.warmup,
            "block": args.block, "pause_s": args.pause_s, "jax": jax.__version__, "numpy": np.__version__,
            "xla_flags": os.environ.get("XLA_FLAGS")}
    os.makedirs(os.path.dirname(args.json) or ".", exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"info": info, "models": rows}, f, indent=1)
    print(f"\nwrote {args.json}")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
