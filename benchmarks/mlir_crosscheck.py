"""Cross-check of target="mlir" (upstream mlir-opt-19 / mlir-translate-19 / llc-19) against the C
backend (target="cpu") on the zoo.

    .venv/bin/python benchmarks/mlir_crosscheck.py                     # all 14 zoo models
    .venv/bin/python benchmarks/mlir_crosscheck.py mlp_small bert_tiny --repeats 5 --json out.json
    .venv/bin/python benchmarks/mlir_crosscheck.py --warm-cache        # reuse ~/.cache/tensorforge

Each model is imported once and the graph compiled for both targets. The table gives:

- ``mlir s`` / ``cpu s``: compile time of the imported graph (optimisation, lowering, code
  generation, tools, loading); by default the compile cache starts empty so every tool runs;
- ``export / opt / transl / llc / link``: the MLIR backend's stages in seconds (loop-level export
  to MLIR text, then each upstream tool);
- ``mlir ms`` / ``cpu ms``: median latency of ``run`` (NumPy in) over ``--repeats`` calls after
  one warm-up, on the same inputs; the MLIR loops are unscheduled and single-threaded, so expect
  them to be far slower: the point of the backend is agreement, not speed;
- ``max rel``: the worst ``max|mlir - cpu| / max|cpu|`` over the outputs
  (``tensorforge.benchmark.stats.max_rel_err_all``); ``ok`` when it is at most 1e-5.

A model that fails on either target is a row with its error, not the end of the run. The JSON
file holds every row with the load average. This is a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Sequence

TOLERANCE = 1e-5
STAGES = ("export", "mlir-opt", "mlir-translate", "llc", "link")


def median_ms(call: Callable[[], Any], repeats: int) -> float:
    """Median wall time of ``call()`` in milliseconds, after one warm-up call."""
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def crosscheck(name: str, repeats: int, threads: int | None) -> dict[str, Any]:
    """One row: compile times, latencies and the largest difference of ``name`` on both targets."""
    import tensorforge
    from tensorforge import models
    from tensorforge.benchmark.stats import max_rel_err_all

    row: dict[str, Any] = {"model": name, "load_before": os.getloadavg()[0]}
    module, example = models.get(name)
    arrays = [t.numpy() for t in example]
    start = time.perf_counter()
    graph = tensorforge.import_model(module, example)
    row["import_s"] = time.perf_counter() - start
    compiled = {}
    for target in ("mlir", "cpu"):
        start = time.perf_counter()
        try:
            compiled[target] = tensorforge.compile(graph, target=target, threads=threads)
        except tensorforge.TensorforgeError as exc:
            row[f"{target}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            continue
        row[f"{target}_compile_s"] = time.perf_counter() - start
    if "mlir" in compiled:
        row["mlir_stages_s"] = dict(compiled["mlir"].native.build["compile_s"])
    outs = {}
    for target, cm in compiled.items():
        try:
            outs[target] = cm.run(*arrays)
            row[f"{target}_ms"] = median_ms(lambda cm=cm: cm.run(*arrays), repeats)
        except tensorforge.TensorforgeError as exc:
            row[f"{target}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    if len(outs) == 2:
        row["max_rel"] = max_rel_err_all(outs["mlir"], outs["cpu"])
        row["ok"] = row["max_rel"] <= TOLERANCE
    row["load_after"] = os.getloadavg()[0]
    return row


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as a fixed-width text table (errors on lines of their own)."""
    head = (f"{'model':<22}{'mlir s':>8}{'cpu s':>8}{'export':>8}{'opt':>7}{'transl':>7}{'llc':>7}{'link':>6}"
            f"{'mlir ms':>10}{'cpu ms':>9}{'max rel':>10}  ok")
    lines = [head, "-" * len(head)]
    for r in rows:
        st = r.get("mlir_stages_s", {})
        stage = "".join(f"{_num(st.get(s), 2):>{w}}" for s, w in zip(STAGES, (8, 7, 7, 7, 6)))
        lines.append(f"{r['model']:<22}{_num(r.get('mlir_compile_s'), 2):>8}{_num(r.get('cpu_compile_s'), 2):>8}"
                     f"{stage}{_num(r.get('mlir_ms'), 2):>10}{_num(r.get('cpu_ms'), 3):>9}"
                     f"{_sci(r.get('max_rel')):>10}  {'yes' if r.get('ok') else 'NO'}")
        for target in ("mlir", "cpu"):
            if f"{target}_error" in r:
                lines.append(f"    {target}: {r[f'{target}_error'][:160]}")
    return "\n".join(lines)


def _num(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _sci(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def main(argv: Sequence[str] | None = None) -> int:
    from tensorforge import models
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="zoo model names (default: all of tensorforge.models.names())")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per model and target (default 3)")
    parser.add_argument("--threads", type=int, default=None, help="threads of the C backend (default: all cores)")
    parser.add_argument("--json", default="mlir_crosscheck.json", help="where the rows go (default: %(default)s)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="use the configured compile cache instead of an empty temporary one")
    args = parser.parse_args(argv)
    names = args.names or list(models.names())
    unknown = [n for n in names if n not in models.names()]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(models.names())}")
    from tensorforge.codegen.mlir.toolchain import missing_tools
    if missing_tools():
        print(f"missing tools: {', '.join(missing_tools())} (apt-get install mlir-19-tools llvm-19)", file=sys.stderr)
        return 2
    cache = None if args.warm_cache else tempfile.TemporaryDirectory(prefix="tf-mlir-crosscheck-")
    if cache is not None:
        os.environ["TENSORFORGE_CACHE"] = cache.name
    rows = []
    try:
        for name in names:
            rows.append(crosscheck(name, args.repeats, args.threads))
            print(table(rows[-1:]).splitlines()[-1] if "mlir_error" not in rows[-1] and "cpu_error" not in rows[-1]
                  else f"{name}: error", file=sys.stderr, flush=True)
    finally:
        if cache is not None:
            cache.cleanup()
    print(table(rows))
    with open(args.json, "w") as f:
        json.dump({"rows": rows, "tolerance": TOLERANCE, "repeats": args.repeats, "cold_cache": not args.warm_cache},
                  f, indent=2, default=float)
    print(f"wrote {args.json}")
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
