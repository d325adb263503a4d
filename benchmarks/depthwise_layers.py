"""Depthwise convolutions of MobileNetV2 (3x3) and EfficientNet (5x5): tensorforge against torch and onnxruntime.

    .venv/bin/python benchmarks/depthwise_layers.py                   # batch 1, 2 threads
    .venv/bin/python benchmarks/depthwise_layers.py --repeats 15 --only 144@56
    .venv/bin/python benchmarks/depthwise_layers.py --batch 8 --only 480@14 576@14

A layer is ``clip(conv2d(x, w, b, groups=C), 0, 6)`` (BatchNorm folded into w and b; ReLU6), the
form both networks run.  Contenders, timed interleaved in one process (medians of rounds after
warm-up, ``tensorforge.benchmark.time_interleaved`` in blocks, since every library here keeps its
threads spinning for a while after a call):

* ``tf``: ``tensorforge.compile(layer, (x,))`` then ``cm(x)`` (the depthwise kernel, ``depthwise.py``);
* ``tf-old``: the same with ``TENSORFORGE_DEPTHWISE=0`` (the generic scheduled loop nest it replaced);
* ``torch``: ``torch.nn.functional.conv2d(x, w, b, ...)`` alone (no activation: torch's best case);
* ``ort``: onnxruntime on a ``Conv`` + ``Clip`` graph (it fuses them), built with ``onnx.helper``.

GB/s count input + output + weights once (what a kernel must move); ``copy`` is ``np.copyto`` of a
buffer of the same byte count split into read and write halves (one thread), the machine's
bandwidth at that footprint.  The machine is shared: compare within a row.
"""
from __future__ import annotations

import argparse
import os
import time

from layer_peers import conv_session

# (channels, input size, kernel, stride)
LAYERS = ((32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 3, 2), (192, 28, 3, 1), (192, 28, 3, 2),
          (384, 14, 3, 1), (576, 14, 3, 1), (576, 14, 3, 2), (960, 7, 3, 1),
          (240, 28, 5, 1), (480, 14, 5, 1), (672, 14, 5, 2), (1152, 7, 5, 1))
MARKER = "depthwise direct kernel (depthwise.py)"      # how the kernel shows in the generated C


def bench_layer(c: int, size: int, k: int, s: int, threads: int, repeats: int, block: int,
                pause: float = 0.05, batch: int = 1) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F

    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.codegen.c import depthwise

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c, c, k, s, k // 2, groups=c, bias=True)
    layer = torch.nn.Sequential(conv, torch.nn.ReLU6()).eval()
    x = torch.randn(batch, c, size, size)
    xn = x.numpy()
    with torch.no_grad():
        ref = layer(x).numpy()
    w, b = conv.weight.detach(), conv.bias.detach()
    compiled = {}
    for name, env in (("tf", "1"), ("tf-old", "0")):
        os.environ[depthwise.ENV] = env
        cm = tensorforge.compile(layer, (x,), threads=threads)
        used = MARKER in cm.source
        if used != (env == "1"):
            raise SystemExit(f"{c}@{size} k{k} s{s}: {name} {'did not use' if not used else 'used'} the depthwise kernel")
        out = cm(xn)
        err = float(np.abs(out - ref).max() / np.abs(ref).max())
        if err > 1e-4:
            raise SystemExit(f"{c}@{size} k{k} s{s}, {name}: max relative error {err:.2e}")
        compiled[name] = cm
    os.environ.pop(depthwise.ENV, None)
    sess = conv_session(w.numpy(), b.numpy(), size, s, c, threads, batch=batch)
    feed = {"x": xn}
    err = float(np.abs(sess.run(None, feed)[0] - ref).max() / np.abs(ref).max())
    if err > 1e-4:
        raise SystemExit(f"{c}@{size} k{k} s{s}, onnxruntime: max relative error {err:.2e}")
    out_elems = ref.size
    nbytes = 4 * (x.numel() + out_elems + w.numel() + b.numel())
    half = nbytes // 8
    src, dst = np.ones(half, np.float32), np.empty(half, np.float32)

    def run_torch():
        with torch.no_grad():
            F.conv2d(x, w, b, s, k // 2, 1, c)

    torch.set_num_threads(threads)
    contenders = {"tf": lambda: compiled["tf"](xn), "tf-old": lambda: compiled["tf-old"](xn), "torch": run_torch,
                  "ort": lambda: sess.run(None, feed), "copy": lambda: np.copyto(dst, src)}
    t = time_interleaved(contenders, repeats=repeats, warmup=2, block=block, pause_s=pause)
    ms = {k_: v.median_ms for k_, v in t.items()}
    best = {k_: v.min_ms for k_, v in t.items()}
    return {"layer": f"{c}@{size} {k}x{k} s{s}", "ms": ms, "gbs": {k_: nbytes / v / 1e6 for k_, v in ms.items()},
            "best": best, "bytes": nbytes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.05,
                    help="seconds of pause before each contender's block: the previous library's threads stop spinning")
    ap.add_argument("--only", nargs="*", default=None, help="layers as C@size (e.g. 144@56)")
    args = ap.parse_args()
    cols = ("tf", "tf-old", "torch", "ort", "copy")
    print(f"ms (GB/s), batch {args.batch}, {args.threads} thread(s), medians of {args.repeats} interleaved rounds "
          f"of {args.block} calls after a {args.pause} s pause; load average before: {os.getloadavg()}")
    print(f"{'layer':18s} {'KiB':>6s} " + " ".join(f"{c:>14s}" for c in cols) + "  torch/tf  ort/tf  old/tf")
    start = time.time()
    for c, size, k, s in LAYERS:
        if args.only and f"{c}@{size}" not in args.only:
            continue
        r = bench_layer(c, size, k, s, args.threads, args.repeats, args.block, args.pause, args.batch)
        ms, gbs = r["ms"], r["gbs"]
        cells = " ".join(f"{ms[k_]:6.3f} ({gbs[k_]:5.1f})" for k_ in cols)
        best = " ".join(f"{r['best'][k_]:6.3f}" for k_ in cols)
        print(f"{r['layer']:18s} {r['bytes'] / 1024:6.0f} {cells}  {ms['torch'] / ms['tf']:7.2f}x "
              f"{ms['ort'] / ms['tf']:6.2f}x {ms['tf-old'] / ms['tf']:6.2f}x   best: {best}", flush=True)
    print(f"load average after: {os.getloadavg()} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
