"""Each convolution algorithm on ResNet's 3x3 layers against torch, in the same process.

    .venv/bin/python benchmarks/conv_layers.py                     # batch 1 and 8, 2 threads
    .venv/bin/python benchmarks/conv_layers.py --batch 8 --threads 1 --repeats 30

A layer is ``relu(conv2d(x, w) + b)`` (one fused kernel).  For every algorithm that applies
(``tensorize.py``: im2col per image, im2col with the batch folded into N, the direct stride-1
kernel, Winograd F(2x2, 3x3) and F(4x4, 3x3)) the layer is compiled with that choice forced the way a tuning
record forces it (``GemmParams.conv_algorithm``), checked against torch, and timed interleaved with
the compiler's own choice ("auto") and ``torch.nn.functional.conv2d``: medians of rounds after
warm-up (``tensorforge.benchmark.time_interleaved``).  GFLOP/s count direct-convolution flops, so a
Winograd layer can read above the machine's GEMM peak.  The machine is shared: compare within a row.
"""
from __future__ import annotations

import argparse

LAYERS = ((64, 56, 64), (128, 28, 128), (256, 14, 256), (512, 7, 512))     # (in channels, size, out channels)
ALGORITHMS = ("im2col", "fold", "direct", "winograd", "winograd4")
# how each algorithm shows in the generated C
MARKERS = {"im2col": ", 1, 0);", "fold": "tf_fold_scatter, &fctx", "direct": "_unit(&shape",
           "winograd": "the 16 products M_e", "winograd4": "the 36 products M_e"}


def forced(algorithm: str, threads: int):
    """A tuning that gives every contraction the default params with ``algorithm`` for convolutions."""
    import dataclasses

    from tensorforge.codegen.c.microkernels import GemmParams
    from tensorforge.codegen.target import Target
    from tensorforge.tune.apply import Tuning

    target = Target.host()
    params = GemmParams.for_target(target, threads=threads, pack_a=False, conv_algorithm=algorithm)
    return Tuning(lambda key: {"kind": "gemm", "params": dataclasses.asdict(params)}, target)


def bench_layer(c: int, size: int, o: int, batch: int, threads: int, repeats: int) -> dict:
    import numpy as np
    import torch

    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.codegen.c.build import build_native
    from tensorforge.passes.pipeline import optimize

    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Conv2d(c, o, 3, padding=1), torch.nn.ReLU()).eval()
    x = torch.randn(batch, c, size, size)
    with torch.no_grad():
        ref = layer(x).numpy()
    module = tensorforge.import_model(layer, (x,))
    optimize(module, "cpu", None)
    xn = x.numpy()
    contenders, chosen = {}, None
    for algorithm in ("auto",) + ALGORITHMS:
        model, src = build_native(module, threads=threads, tuning=None if algorithm == "auto" else forced(algorithm, threads))
        used = next((a for a in ALGORITHMS if MARKERS[a] in src), "?")
        if algorithm == "auto":
            chosen = used
        elif used != algorithm:          # does not apply to this layer (the compiler fell back)
            continue
        out = model.run([xn])[0]
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        if err > 1e-4:
            raise SystemExit(f"conv {c}x{size}x{size} -> {o}, {algorithm}: max relative error {err:.2e}")
        contenders[algorithm] = (lambda model=model: model.run([xn]))

    def run_torch():
        with torch.no_grad():
            layer(x)

    contenders["torch"] = run_torch
    torch.set_num_threads(threads)
    t = time_interleaved(contenders, repeats=repeats, warmup=3)
    flop = 2.0 * batch * o * c * 9 * size * size
    return {"layer": f"{c}x{size}x{size}->{o}", "batch": batch, "auto": chosen,
            "ms": {k: v.median_ms for k, v in t.items()}, "gflops": {k: flop / v.median_ms / 1e6 for k, v in t.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--only", nargs="*", default=None, help="layers as C@size (e.g. 64@56)")
    args = ap.parse_args()
    cols = ("auto",) + ALGORITHMS + ("torch",)
    print(f"ms (GFLOP/s), {args.threads} thread(s), medians of {args.repeats} interleaved rounds")
    print(f"{'layer':18s} {'batch':>5s} {'auto is':>8s} " + " ".join(f"{c:>15s}" for c in cols) + "  torch/auto")
    for batch in args.batch:
        for c, size, o in LAYERS:
            if args.only and f"{c}@{size}" not in args.only:
                continue
            r = bench_layer(c, size, o, batch, args.threads, args.repeats)
            cells = " ".join(f"{r['ms'][k]:7.2f} ({r['gflops'][k]:4.0f})" if k in r["ms"] else f"{'-':>15s}" for k in cols)
            print(f"{r['layer']:18s} {batch:5d} {r['auto']:>8s} {cells}  {r['ms']['torch'] / r['ms']['auto']:.2f}x")


if __name__ == "__main__":
    main()
