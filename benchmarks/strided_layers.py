"""Strided and late-stage convolutions of ResNet: tensorforge against its usual orientation, torch and onnxruntime.

    .venv/bin/python benchmarks/strided_layers.py                 # batch 1, 2 threads
    .venv/bin/python benchmarks/strided_layers.py --batch 8 --repeats 15
    .venv/bin/python benchmarks/strided_layers.py --switch TENSORFORGE_STRIDED_DIRECT   # tf-std: im2col

A layer is ``relu(conv2d(x, w, b))``.  Contenders, timed interleaved in one process (medians of
blocks of calls after a pause and a warm-up call, ``tensorforge.benchmark.time_interleaved``):

* ``tf``: ``tensorforge.compile(layer, (x,))`` then ``cm(x)``; the ``T`` column says whether it
  chose the transposed GEMM (``tensorize.py``, ``KernelPlan.transposed``: output channels in the
  vector lanes, the positions as rows, the result written back transposed), the ``D`` column
  whether it chose the direct kernel (``direct_conv.py``);
* ``tf-std``: the same with the ``--switch`` variable set to 0: ``TENSORFORGE_TRANSPOSED_GEMM``
  (default; positions in the vector lanes) or ``TENSORFORGE_STRIDED_DIRECT`` (strided layers on
  im2col instead of the direct kernel's polyphase split);
* ``torch``: the layer in torch eager (``torch.no_grad``);
* ``ort``: onnxruntime on the Conv alone (batch 1 only: ``layer_peers.conv_session``; no ReLU, its best case).

GFLOP/s count ``2 * Cin * Cout * k * k * OH * OW * batch``.  The machine is shared: compare within a row.
"""
from __future__ import annotations

import argparse
import os

# (in channels, out channels, input size, kernel, stride, padding): ResNet's and MobileNetV2's stems first
LAYERS = ((3, 64, 224, 7, 2, 3), (3, 32, 224, 3, 2, 1), (64, 128, 56, 3, 2, 1), (128, 256, 28, 3, 2, 1), (256, 512, 14, 3, 2, 1), (64, 128, 56, 1, 2, 0),
          (128, 256, 28, 1, 2, 0), (256, 512, 14, 1, 2, 0), (1024, 2048, 14, 1, 2, 0), (512, 512, 7, 3, 1, 1))


def bench_layer(cin: int, cout: int, size: int, k: int, stride: int, pad: int, batch: int, threads: int,
                repeats: int, switch: str = "TENSORFORGE_TRANSPOSED_GEMM") -> dict:
    import numpy as np
    import torch

    from layer_peers import compile_with_and_without, conv_session

    from tensorforge.benchmark import time_interleaved

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(cin, cout, k, stride, pad)
    layer = torch.nn.Sequential(conv, torch.nn.ReLU()).eval()
    x = torch.randn(batch, cin, size, size)
    with torch.no_grad():
        ref = layer(x)
    cm, cm_std = compile_with_and_without(layer, (x,), threads, switch)
    name = f"{cin}->{cout} {k}x{k}/{stride} @{size}"
    err = max(float((m(x) - ref).abs().max() / ref.abs().max()) for m in (cm, cm_std))
    if err > 1e-4:
        raise SystemExit(f"{name}: tensorforge's max relative error {err:.2e}")

    def run_torch():
        with torch.no_grad():
            layer(x)

    torch.set_num_threads(threads)
    contenders = {"tf": lambda: cm(x), "tf-std": lambda: cm_std(x), "torch": run_torch}
    if batch == 1 and 2 * pad == k - 1:
        sess = conv_session(conv.weight.detach().numpy(), conv.bias.detach().numpy(), size, stride, 1, threads,
                            clip=False)
        feed = {"x": x.numpy()}
        np.testing.assert_allclose(np.maximum(sess.run(None, feed)[0], 0), ref.numpy(), rtol=1e-3, atol=1e-3)
        contenders["ort"] = lambda: sess.run(None, feed)
    t = time_interleaved(contenders, repeats=repeats, warmup=2, block=5, pause_s=0.05)
    ms = {n: v.median_ms for n, v in t.items()}
    flop = 2.0 * cin * cout * k * k * ref.shape[2] * ref.shape[3] * batch
    return {"layer": name, "transposed": "trans_c=True" in cm.source, "direct": "_unit(&shape, toff" in cm.source, "ms": ms,
            "gflops": {n: flop / v / 1e6 for n, v in ms.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--only", type=int, nargs="*", default=None, help="indices into LAYERS")
    ap.add_argument("--switch", default="TENSORFORGE_TRANSPOSED_GEMM",
                    choices=("TENSORFORGE_TRANSPOSED_GEMM", "TENSORFORGE_STRIDED_DIRECT"),
                    help="the variable the tf-std column sets to 0")
    args = ap.parse_args()
    cols = ("tf", "tf-std", "torch", "ort")
    print(f"ms (GFLOP/s), batch {args.batch}, {args.threads} thread(s), medians of {args.repeats} interleaved "
          f"rounds of 5 calls; tf-std: {args.switch}=0; load average before: {os.getloadavg()}")
    print(f"{'layer':22s} T D  " + " ".join(f"{c:>14s}" for c in cols) + "  std/tf  torch/tf  ort/tf")
    for i, layer in enumerate(LAYERS):
        if args.only is not None and i not in args.only:
            continue
        r = bench_layer(*layer, args.batch, args.threads, args.repeats, args.switch)
        ms, gf = r["ms"], r["gflops"]
        cells = " ".join(f"{ms[c]:6.3f} ({gf[c]:5.0f})" if c in ms else f"{'-':>14s}" for c in cols)
        ratios = " ".join(f"{ms[c] / ms['tf']:6.2f}x" if c in ms else "      -" for c in ("tf-std", "torch", "ort"))
        flags = " ".join("y" if r[k] else "n" for k in ("transposed", "direct"))
        print(f"{r['layer']:22s} {flags}  {cells}  {ratios}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
