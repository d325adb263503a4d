"""Exports every zoo model at both levels (``tensorforge.export_mlir``) and verifies each module
with ``mlir-opt-19`` (registered dialects only: no ``--allow-unregistered-dialect``).

    .venv/bin/python benchmarks/mlir_export_zoo.py                  # all 14 zoo models
    .venv/bin/python benchmarks/mlir_export_zoo.py resnet18 bert_base --json out.json

Prints one row per model and level: export seconds, text size, mlir-opt seconds, verdict.  This is
a check of the whole zoo at full size (the CI test runs the small variants); not a test.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    import tensorforge
    from tensorforge import models
    from tensorforge.codegen.mlir.export import verify_mlir
    from tensorforge.errors import TensorforgeError

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=models.names())
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    rows, bad = [], 0
    print(f"{'model':24s} {'level':10s} {'export s':>9s} {'MB':>8s} {'verify s':>9s}  result")
    for name in args.models:
        module, inputs = models.get(name)
        for level in ("structured", "loop"):
            row = {"model": name, "level": level}
            try:
                t0 = time.perf_counter()
                text = tensorforge.export_mlir(module, level=level, example_inputs=inputs)
                row["export_s"] = time.perf_counter() - t0
                row["mb"] = len(text) / 1e6
                t0 = time.perf_counter()
                verify_mlir(text, timeout=3600)
                row["verify_s"] = time.perf_counter() - t0
                row["result"] = "verified"
            except TensorforgeError as e:
                row["result"] = f"error: {e}"
                bad += 1
            rows.append(row)
            print(f"{name:24s} {level:10s} {row.get('export_s', 0):9.1f} {row.get('mb', 0):8.1f} "
                  f"{row.get('verify_s', 0):9.1f}  {row['result'][:100]}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
