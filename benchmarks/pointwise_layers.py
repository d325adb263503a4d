"""Pointwise (1x1) convolutions of MobileNetV2 and EfficientNet-B0: tensorforge against torch and onnxruntime.

    .venv/bin/python benchmarks/pointwise_layers.py                   # batch 1, 2 threads
    .venv/bin/python benchmarks/pointwise_layers.py --repeats 15 --only 320@7

A layer is ``clip(conv2d(x, w, b), 0, 6)`` with a 1x1 kernel (BatchNorm folded into w and b), or the
conv alone for the linear projections (``clip`` column).  Contenders, timed interleaved in one
process (medians of blocks of calls after warm-up, ``tensorforge.benchmark.time_interleaved``):

* ``tf``: ``tensorforge.compile(layer, (x,))`` then ``cm(x)``;
* ``tf-std``: the same with ``TENSORFORGE_TRANSPOSED_GEMM=0`` (the GEMM in the layer's orientation,
  output channels as rows, positions in the vector lanes, which the transposed GEMM replaced);
* ``torch``: ``torch.nn.functional.conv2d`` (no activation);
* ``ort``: onnxruntime on the same Conv (+ Clip) graph (``layer_peers.py``).

GFLOP/s count ``2 * Cin * Cout * H * W``; ``% peak`` divides tensorforge's by the GEMM peak that
``tensorforge bench --roofline`` measured and cached (the issue's target for 1x1 layers is 85%).
The machine is shared: compare within a row.
"""
from __future__ import annotations

import argparse
import os
import time

from layer_peers import compile_with_and_without, conv_session

# (in channels, size, out channels, stride, clip)
LAYERS = ((32, 112, 16, 1, False), (16, 112, 96, 1, True), (96, 56, 24, 1, False), (24, 56, 144, 1, True),
          (144, 56, 24, 1, False), (144, 28, 32, 1, False), (32, 28, 192, 1, True), (192, 28, 32, 1, False),
          (192, 14, 64, 1, False), (64, 14, 384, 1, True), (384, 14, 64, 1, False), (384, 14, 96, 1, False),
          (96, 14, 576, 1, True), (576, 14, 96, 1, False), (576, 7, 160, 1, False), (160, 7, 960, 1, True),
          (960, 7, 160, 1, False), (960, 7, 320, 1, False), (320, 7, 1280, 1, True),
          (40, 28, 240, 1, True), (240, 28, 40, 1, False), (672, 14, 112, 1, False), (1152, 7, 320, 1, False),
          (256, 56, 512, 2, False), (1024, 14, 2048, 2, False))


def bench_layer(c: int, size: int, o: int, stride: int, clip: bool, threads: int, repeats: int, block: int,
                pause: float = 0.05) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    from tensorforge.benchmark import time_interleaved

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c, o, 1, stride, bias=True)
    layer = torch.nn.Sequential(conv, torch.nn.ReLU6()).eval() if clip else conv.eval()
    x = torch.randn(1, c, size, size)
    xn = x.numpy()
    with torch.no_grad():
        ref = layer(x).numpy()
    cm, cm_std = compile_with_and_without(layer, (x,), threads, "TENSORFORGE_TRANSPOSED_GEMM")
    name = f"{c}@{size}->{o}" + (f" s{stride}" if stride > 1 else "")
    err = max(float(np.abs(m(xn) - ref).max() / np.abs(ref).max()) for m in (cm, cm_std))
    if err > 1e-4:
        raise SystemExit(f"{name}: tensorforge's max relative error {err:.2e}")
    w, b = conv.weight.detach(), conv.bias.detach()
    sess = conv_session(w.numpy(), b.numpy(), size, stride, 1, threads, clip=clip)
    feed = {"x": xn}
    err = float(np.abs(sess.run(None, feed)[0] - ref).max() / np.abs(ref).max())
    if err > 1e-4:
        raise SystemExit(f"{name}: onnxruntime's max relative error {err:.2e}")

    def run_torch():
        with torch.no_grad():
            F.conv2d(x, w, b, stride)

    torch.set_num_threads(threads)
    contenders = {"tf": lambda: cm(xn), "tf-std": lambda: cm_std(xn), "torch": run_torch, "ort": lambda: sess.run(None, feed)}
    t = time_interleaved(contenders, repeats=repeats, warmup=2, block=block, pause_s=pause)
    ms = {k: v.median_ms for k, v in t.items()}
    flop = 2.0 * c * o * ref.shape[2] * ref.shape[3]
    return {"layer": name, "ms": ms, "gflops": {k: flop / v / 1e6 for k, v in ms.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.05,
                    help="seconds of pause before each contender's block: the previous library's threads stop spinning")
    ap.add_argument("--only", nargs="*", default=None, help="layers as C@size (e.g. 320@7)")
    args = ap.parse_args()
    from tensorforge.benchmark.roofline import cached_roofline

    roof = cached_roofline()
    peak = roof.gemm_gflops if roof is not None and roof.threads == args.threads else None
    cols = ("tf", "tf-std", "torch", "ort")
    print(f"ms (GFLOP/s), batch 1, {args.threads} thread(s), medians of {args.repeats} interleaved rounds "
          f"of {args.block} calls after a {args.pause} s pause; GEMM peak {peak or float('nan'):.0f} GFLOP/s; load average before: {os.getloadavg()}")
    print(f"{'layer':18s} " + " ".join(f"{c:>14s}" for c in cols) + "  % peak  std/tf  torch/tf  ort/tf")
    start, ratios = time.time(), []
    for c, size, o, stride, clip in LAYERS:
        if args.only and f"{c}@{size}" not in args.only:
            continue
        r = bench_layer(c, size, o, stride, clip, args.threads, args.repeats, args.block, args.pause)
        ms, gf = r["ms"], r["gflops"]
        cells = " ".join(f"{ms[k]:6.3f} ({gf[k]:5.0f})" for k in cols)
        pct = 100 * gf["tf"] / peak if peak else float("nan")
        ratios.append(ms["ort"] / ms["tf"])
        print(f"{r['layer']:18s} {cells}  {pct:5.0f}%  {ms['tf-std'] / ms['tf']:6.2f}x {ms['torch'] / ms['tf']:7.2f}x {ms['ort'] / ms['tf']:6.2f}x", flush=True)
    if ratios:
        import math
        print(f"geomean ort/tf {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x; "
              f"load average after: {os.getloadavg()} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
