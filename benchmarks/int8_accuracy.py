"""int8 / bf16 accuracy on real images with no downloads: scikit-learn's digits, several seeds.

    .venv/bin/python benchmarks/int8_accuracy.py --seeds 5
    .venv/bin/python benchmarks/int8_accuracy.py --seeds 2 --models mlp --epochs 10 --json acc.json

Per seed, a small CNN and an MLP are trained (torch, CPU, seconds) on a stratified training split;
200 other images calibrate and 500 more test (``tensorforge.testing.digits``, which
``tests/quantization/test_accuracy_digits.py`` shares, so the test asserts what this prints).
Contenders on the test split, against the torch float32 logits:

* ``tf-f32``: ``tensorforge.compile`` in float32 (agreement 100% and a high SQNR: a sanity row);
* ``tf-int8``: ``tensorforge.quantize`` with its defaults (the first and last contractions stay
  float32), then compiled: what ``compile(precision="int8", calibration=...)`` builds;
* ``tf-int8-all``: every contraction tensorforge can quantize, as onnxruntime does;
* ``tf-bf16``: ``compile(precision="bf16")`` (only on CPUs with avx512_bf16, else n/a);
* ``ort-int8``: onnxruntime ``quantize_static`` (QDQ, per-channel int8 weights, uint8
  activations, MinMax) calibrated on the same batches, run by onnxruntime.  Its QDQ graph also
  quantizes every quantized op's output, the logits included (QuantizeLinear before the model's
  output), and the biases to int32; tensorforge keeps its rescaled outputs and biases float32, so
  compare the SQNR columns knowing that.

Columns: top-1 % (mean ± sample std over seeds), Δtop-1 (the paired difference from torch float32,
per seed, then mean ± std: it removes the spread between seeds' models), agreement % (predictions
equal to float32's), logit SQNR dB (10 log10 of sum f32² / sum (q - f32)²), and ``int8 ops``: how
many contractions the int8 rewrite took (``tf.quantized``; which ones depends on the tensorforge
version: linear layers, and convolutions once ``graph.qconv`` exists).  One test image is 0.2
points of top-1.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings

import numpy as np

from tensorforge.testing import digits

CONTENDERS = ("torch-f32", "tf-f32", "tf-int8", "tf-int8-all", "tf-bf16", "ort-int8")


def _mean_std(values: list[float], digits_: int = 2) -> str:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return "inf" if values else "n/a"
    mean = float(np.mean(finite))
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0
    return f"{mean:.{digits_}f} ± {std:.{digits_}f}"


def run(models: list[str], seeds: int, epochs: int) -> tuple[list[digits.Result], float]:
    """Every model for seeds ``0 .. seeds-1``; the results and the wall time."""
    results = []
    t0 = time.perf_counter()
    for kind in models:
        for seed in range(seeds):
            t = time.perf_counter()
            r = digits.evaluate(kind, seed, epochs=epochs, strict=False)
            failed = "".join(f"; {name} FAILED: {err}" for name, err in r.failed.items())
            print(f"  {kind} seed {seed}: {time.perf_counter() - t:.1f} s{failed}", file=sys.stderr, flush=True)
            results.append(r)
    return results, time.perf_counter() - t0


def table(results: list[digits.Result], models: list[str]) -> str:
    """The markdown table: one row per model and contender, statistics over seeds."""
    lines = ["| model | precision | top-1 % | Δtop-1 vs f32 | agreement % | logit SQNR dB | int8 ops | seeds |",
             "|---|---|---|---|---|---|---|---|"]
    for kind in models:
        rs = [r for r in results if r.kind == kind]
        for name in CONTENDERS:
            have = [r for r in rs if name in r.logits]
            if not have:
                why = "failed" if any(name in r.failed for r in rs) else "n/a"
                lines.append(f"| {kind} | {name} | {why} | | | | | 0/{len(rs)} |")
                continue
            m = [r.metrics(name) for r in have]
            delta = [x["top1"] - r.metrics("torch-f32")["top1"] for x, r in zip(m, have)]
            ops = sorted({len(r.quantized[name]) for r in have}) if name in have[0].quantized else []
            lines.append(f"| {kind} | {name} | {_mean_std([x['top1'] for x in m])} | "
                         f"{'' if name == 'torch-f32' else _mean_std(delta)} | {_mean_std([x['agree'] for x in m])} | "
                         f"{'' if name == 'torch-f32' else _mean_std([x['sqnr_db'] for x in m], 1)} | "
                         f"{'/'.join(map(str, ops))} | {len(have)}/{len(rs)} |")
    return "\n".join(lines)


def as_json(results: list[digits.Result], args: argparse.Namespace, wall_s: float) -> dict:
    return {"seeds": args.seeds, "epochs": args.epochs, "wall_s": wall_s, "bf16_cpu": _bf16(),
            "runs": [{"model": r.kind, "seed": r.seed, "test_images": int(len(r.labels)),
                      "metrics": {n: {k: (round(v, 4) if math.isfinite(v) else None) for k, v in r.metrics(n).items()}
                                  for n in r.logits},
                      "quantized": r.quantized, "failed": r.failed} for r in results]}


def _bf16() -> bool:
    from tensorforge.quantization import bf16
    return bf16.supported()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 (split, initial weights, batch order)")
    ap.add_argument("--models", nargs="*", default=list(digits.MODELS), choices=digits.MODELS)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--json", metavar="PATH", help="also write every seed's metrics here")
    args = ap.parse_args()
    warnings.filterwarnings("ignore", category=FutureWarning)      # torch.export's deprecation notices

    import torch
    ort = "absent"
    if digits.has_onnxruntime():
        import onnxruntime
        ort = onnxruntime.__version__
    print(f"digits: {args.seeds} seed(s), {args.epochs} epochs, splits calibration {digits.N_CAL} / test "
          f"{digits.N_TEST} / the rest trains (stratified); torch {torch.__version__}, onnxruntime {ort}, "
          f"avx512_bf16: {'yes' if _bf16() else 'no'}, {platform.machine()}, load average {os.getloadavg()[0]:.1f}")
    results, wall_s = run(args.models, args.seeds, args.epochs)
    print(table(results, args.models))
    failures = sorted({f"{r.kind} {n}: {e}" for r in results for n, e in r.failed.items()})
    for f in failures:
        print(f"FAILED {f}")
    print(f"{wall_s:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(as_json(results, args, wall_s), f, indent=1)


if __name__ == "__main__":
    main()
