"""Zoo models quantized by onnxruntime: tensorforge int8 against onnxruntime int8 on the same file.

    .venv/bin/python benchmarks/int8_models.py                      # bert_base and mlp, batch 1, 2 threads
    .venv/bin/python benchmarks/int8_models.py --models resnet50 mobilenet_v2 --format static
    .venv/bin/python benchmarks/int8_models.py --models mlp --batch 8 --repeats 15

Each zoo model is exported to ONNX (``torch.onnx.export``, the TorchScript exporter) and quantized
by onnxruntime: ``--format dynamic`` (default) with ``quantize_dynamic`` (int8 weights per tensor,
uint8 activations quantized at run time: MatMulInteger for every MatMul, what onnxruntime
recommends for transformers); ``--format static`` with ``quantize_static`` (QDQ, int8 weights per
channel, uint8 activations, calibrated on the same samples as tensorforge's own ``tf-ptq``).  The
same quantized file is compiled by ``tensorforge.compile`` (MatMulIntegers and QDQ contractions
run on the int8 VNNI kernels, ``graph.qmatmul`` / ``graph.qconv``) and run by onnxruntime; the
float export runs on both too.  ``--agreement N`` also runs N more random inputs through both on
the quantized file: top-1 agreement (class scores only), the largest difference of the outputs and the worst cosine of an output row.  Contenders are timed interleaved in one process (medians of blocks of calls after a
pause, ``tensorforge.benchmark.time_interleaved``).

``tf-ptq`` is tensorforge's own post-training quantization of the zoo model
(``tensorforge.quantize`` then ``compile``, 4 calibration inputs drawn with other seeds; the
first and last contractions stay float32 unless ``--all-layers``); ``tf-bf16`` the zoo model compiled with
``precision="bf16-or-f32"`` (AVX512_BF16 linear layers; float32 with a warning elsewhere).

Accuracy: the int8 outputs against the float model's (cosine similarity per output row, the
worst row; relative max difference) and tensorforge int8 against onnxruntime int8 on the same
quantized file.  The machine is shared: compare within a row.
"""
from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
import warnings


def _export(name: str, batch: int):
    import torch

    from tensorforge.models import get
    model, inputs = get(name, batch)
    buf = io.BytesIO()
    names = [f"input{i}" for i in range(len(inputs))]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, inputs, buf, dynamo=False, input_names=names)
    return buf.getvalue(), {n: t.numpy() for n, t in zip(names, inputs)}


def _quantize(model: bytes, fmt: str, calibration: list[dict]) -> bytes:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                          quantize_static)

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calibration)

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f32.onnx"), os.path.join(d, "int8.onnx")
        with open(src, "wb") as f:
            f.write(model)
        if fmt == "static":
            quantize_static(src, dst, Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        else:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        with open(dst, "rb") as f:
            return f.read()


def _session(model: bytes, threads: int):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _worst_cosine(a, b) -> float:
    import numpy as np
    a = a.reshape(-1, a.shape[-1]).astype(np.float64)
    b = b.reshape(-1, b.shape[-1]).astype(np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-30)
    return float(cos.min())


def _agreement(name: str, batch: int, tf_int8, ort_int8, names: list[str], n: int) -> tuple:
    """(top-1 agreement or None, largest |difference| of the first outputs, disagreements on
    near-ties, worst cosine of an output row) of tensorforge and onnxruntime on the same quantized
    file over ``n`` more random inputs of the zoo model.  Top-1 only for class scores (a 2-D
    output): a transformer's hidden states have none.  A near-tie: onnxruntime's top two outputs
    closer than the two runs' difference on that input, so either answer is within the
    arithmetic's rounding."""
    import numpy as np

    from tensorforge.models import get
    same, worst, ties, cosine, scores = 0, 0.0, 0, 1.0, True
    for i in range(n):
        args = [t.numpy() for t in get(name, batch, input_seed=1000 + i)[1]]
        a = tf_int8(*args)
        a = np.asarray(a[0] if isinstance(a, (list, tuple)) else a)
        b = np.asarray(ort_int8.run(None, dict(zip(names, args)))[0])
        scores = scores and b.ndim == 2
        a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        cosine = min(cosine, _worst_cosine(a, b))
        agree = bool((a.argmax(1) == b.argmax(1)).all())
        diff = float(np.abs(a - b).max())
        same += agree
        worst = max(worst, diff)
        top2 = np.sort(b, axis=1)[:, -2:]
        ties += int(not agree and float((top2[:, 1] - top2[:, 0]).min()) <= diff)
    return (same / max(n, 1) if scores else None), worst, ties, cosine


def bench_model(name: str, batch: int, threads: int, repeats: int, block: int, pause: float,
                calibration_samples: int = 4, fmt: str = "dynamic", agreement: int = 0, all_layers: bool = False) -> dict:
    import numpy as np
    import onnx

    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.models import get

    f32, feeds = _export(name, batch)
    calibration = [get(name, batch, input_seed=100 + i)[1] for i in range(calibration_samples)]
    t0 = time.perf_counter()
    int8 = _quantize(f32, fmt, [{n: t.numpy() for n, t in zip(feeds, sample)} for sample in calibration])
    quantize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tf_int8 = tensorforge.compile(onnx.load_from_string(int8), threads=threads)
    compile_s = time.perf_counter() - t0
    tf_f32 = tensorforge.compile(onnx.load_from_string(f32), threads=threads)
    # tensorforge's own post-training quantization of the zoo model, calibrated on the same inputs
    model, example = get(name, batch)
    t0 = time.perf_counter()
    quantized = tensorforge.quantize(model, calibration, example, keep_first_last=not all_layers)
    tf_ptq = tensorforge.compile(quantized, threads=threads)
    ptq_s = time.perf_counter() - t0
    tf_bf16 = tensorforge.compile(model, example, threads=threads, precision="bf16-or-f32")
    ort_int8, ort_f32 = _session(int8, threads), _session(f32, threads)
    names = [i.name for i in ort_int8.get_inputs()]
    args = [feeds[n] for n in names]
    from collections import Counter
    ops = Counter(op.name for op in tf_int8.module.main.body)    # the optimised graph that was compiled
    kernels = {k: ops[k] for k in ("graph.qmatmul", "graph.qconv", "graph.matmul", "graph.gemm", "graph.conv") if ops[k]}
    out = {"tf-ptq": tf_ptq(*args), "tf-bf16": tf_bf16(*args), "tf-int8": tf_int8(*args), "ort-int8": ort_int8.run(None, {n: feeds[n] for n in names})[0],
           "f32": ort_f32.run(None, {n: feeds[n] for n in names})[0]}
    out = {k: np.asarray(v[0] if isinstance(v, (list, tuple)) else v) for k, v in out.items()}
    scale = float(np.abs(out["f32"]).max())
    contenders = {"tf-ptq": lambda: tf_ptq(*args), "tf-bf16": lambda: tf_bf16(*args), "tf-int8": lambda: tf_int8(*args), "ort-int8": lambda: ort_int8.run(None, {n: feeds[n] for n in names}),
                  "tf-f32": lambda: tf_f32(*args), "ort-f32": lambda: ort_f32.run(None, {n: feeds[n] for n in names})}
    t = time_interleaved(contenders, repeats=repeats, warmup=2, block=block, pause_s=pause)
    return {"model": name, "batch": batch, "ms": {k: v.median_ms for k, v in t.items()}, "qgemm_calls": kernels,
            "cos_tf": _worst_cosine(out["tf-int8"], out["f32"]), "cos_ptq": _worst_cosine(out["tf-ptq"], out["f32"]),
            "cos_bf16": _worst_cosine(out["tf-bf16"], out["f32"]), "cos_ort": _worst_cosine(out["ort-int8"], out["f32"]),
            "tf_vs_ort": float(np.abs(out["tf-int8"] - out["ort-int8"]).max()) / scale,
            "quantize_s": quantize_s, "compile_s": compile_s, "ptq_s": ptq_s,
            "agreement": _agreement(name, batch, tf_int8, ort_int8, names, agreement) if agreement else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="*", default=["bert_base", "mlp"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--block", type=int, default=3)
    ap.add_argument("--pause", type=float, default=0.2)
    ap.add_argument("--format", choices=("dynamic", "static"), default="dynamic",
                    help="onnxruntime's quantize_dynamic (MatMulInteger) or quantize_static (QDQ)")
    ap.add_argument("--agreement", type=int, default=0, help="random inputs for the tf/ort int8 top-1 agreement")
    ap.add_argument("--all-layers", action="store_true",
                    help="tf-ptq quantizes the first and last layers too (as quantize_static does)")
    args = ap.parse_args()
    cols = ("tf-ptq", "tf-int8", "ort-int8", "tf-bf16", "tf-f32", "ort-f32")
    print(f"onnxruntime quantize_{args.format}; ms, batch {args.batch}, {args.threads} thread(s), medians of {args.repeats} interleaved rounds of "
          f"{args.block} calls after a {args.pause} s pause; load average before: {os.getloadavg()}")
    print(f"{'model':10s} " + " ".join(f"{c:>9s}" for c in cols) +
          "  ort-int8/tf-int8  ort-int8/tf-ptq  tf-f32/tf-ptq  tf-f32/tf-bf16  worst-cos(ptq,tf,ort,bf16 vs f32)  |tf-ort|/max  "
          "compile s (int8, ptq)")
    for name in args.models:
        r = bench_model(name, args.batch, args.threads, args.repeats, args.block, args.pause, fmt=args.format,
                        agreement=args.agreement, all_layers=args.all_layers)
        ms = r["ms"]
        print(f"{name:10s} " + " ".join(f"{ms[c]:9.3f}" for c in cols) +
              f"  {ms['ort-int8'] / ms['tf-int8']:16.2f}x {ms['ort-int8'] / ms['tf-ptq']:15.2f}x"
              f" {ms['tf-f32'] / ms['tf-ptq']:13.2f}x {ms['tf-f32'] / ms['tf-bf16']:14.2f}x"
              f"  {r['cos_ptq']:.5f}, {r['cos_tf']:.5f}, {r['cos_ort']:.5f}, {r['cos_bf16']:.6f}"
              f"   {r['tf_vs_ort']:.1e}  {r['compile_s']:.1f}, {r['ptq_s']:.1f}", flush=True)
        print(f"{'':10s} contractions in tensorforge's build of the onnxruntime file (q*: int8 kernels): {r['qgemm_calls']}")
        if r["agreement"]:
            top1, diff, ties, cos = r["agreement"]
            top1 = (f"top-1 agreement {100 * top1:.0f}% (disagreements on near-ties: {ties})" if top1 is not None
                    else "top-1 n/a (not class scores)")
            print(f"{'':10s} tf vs ort int8 over {args.agreement} random inputs: {top1}, "
                  f"max |diff| of the first output {diff:.4g}, worst row cosine {cos:.5f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
