"""Zoo models quantized by PyTorch's PT2E flow: tensorforge against inductor on the same int8 model.

    .venv/bin/python benchmarks/pt2e_models.py                            # resnet50, mobilenet_v2; batch 1
    .venv/bin/python benchmarks/pt2e_models.py --models resnet18 --batch 8 --repeats 8
    .venv/bin/python benchmarks/pt2e_models.py --models bert_base --dynamic         # linear inputs quantized at run time

Each zoo model goes through torchao's PT2E flow as its X86 tutorial writes it: ``torch.export``
(strict), ``prepare_pt2e`` with ``X86InductorQuantizer``'s default config (uint8 activations per
tensor, int8 weights per channel), calibration on 4 inputs drawn with other seeds, ``convert_pt2e``.
That one quantized ``GraphModule`` is then

- ``tf-pt2e``: compiled by ``tensorforge.compile(q, example)`` and called as ``cm(x)`` with torch
  tensors (its quantize/dequantize pairs run as the int8 kernels of ``qdq-contractions``);
- ``inductor-pt2e``: ``torch.compile(q)`` with inductor's freezing on, the path PyTorch documents for
  these models (oneDNN int8 convolutions and linear layers);
- ``eager-pt2e``: the quantized model run by PyTorch as it is (float32 arithmetic on dequantized
  values: the reference the others are compared with);

and the float model: ``tf-f32`` (``tensorforge.compile``) and ``eager-f32``.  Contenders are timed
interleaved in one process (``tensorforge.benchmark.time_interleaved``: blocks of calls after a
pause, medians).  Agreement: top-1 (for class scores) of ``tf-pt2e`` and ``inductor-pt2e``
against ``eager-pt2e`` over ``--agreement`` random inputs, the largest difference of the first
output relative to its largest magnitude, and the smallest cosine similarity of its rows (a
transformer's tokens).  The machine is shared and noisy: compare within a row.
"""
from __future__ import annotations

import argparse
import json
import time
import warnings


def bench_model(name: str, batch: int, threads: int, repeats: int, block: int, pause: float, agreement: int,
                dynamic: bool = False) -> dict:
    import numpy as np
    import torch

    import tensorforge
    from tensorforge.benchmark import time_interleaved
    from tensorforge.models import get
    from tensorforge.report.collect import collect
    from tensorforge.testing.pt2e import quantize_pt2e

    torch.set_num_threads(threads)
    model, example = get(name, batch)
    calibration = [get(name, batch, input_seed=100 + i)[1] for i in range(4)]
    t0 = time.perf_counter()
    q = quantize_pt2e(model, tuple(example), calibration, dynamic=dynamic)
    quantize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tf_q = tensorforge.compile(q, tuple(example), threads=threads)
    compile_s = time.perf_counter() - t0
    names = [k.name for k in collect(tf_q.module, name).code]
    tf_f32 = tensorforge.compile(model, tuple(example), threads=threads)
    import torch._inductor.config as inductor_config
    inductor_config.freezing = True
    t0 = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        inductor = torch.compile(q)
        inductor(*example)
    inductor_s = time.perf_counter() - t0

    def run(fn):
        def call():
            with torch.no_grad():
                return fn(*example)
        return call

    contenders = {"tf-pt2e": run(tf_q), "inductor-pt2e": run(inductor), "eager-pt2e": run(q),
                  "tf-f32": run(tf_f32), "eager-f32": run(model)}
    t = time_interleaved(contenders, repeats=repeats, warmup=2, block=block, pause_s=pause)
    agree = {"tf-pt2e": 0, "inductor-pt2e": 0}
    worst = {"tf-pt2e": 0.0, "inductor-pt2e": 0.0}
    cosine = {"tf-pt2e": 1.0, "inductor-pt2e": 1.0}
    for i in range(agreement):
        x = get(name, batch, input_seed=1000 + i)[1]
        with torch.no_grad():
            ref = _first(q(*x))
            outs = {"tf-pt2e": _first(tf_q(*x)), "inductor-pt2e": _first(inductor(*x))}
        for k, out in outs.items():
            if ref.ndim == 2:             # class scores (a transformer's hidden states have no top-1)
                agree[k] += int(np.array_equal(out.argmax(-1), ref.argmax(-1)))
            worst[k] = max(worst[k], float(np.abs(out - ref).max() / np.abs(ref).max()))
            cosine[k] = min(cosine[k], _worst_cosine(out, ref))
    return {"model": name, "batch": batch, "ms": {k: v.median_ms for k, v in t.items()},
            "int8_kernels": sum(("qconv" in n) or ("qmatmul" in n) for n in names), "kernels": len(names),
            "quantize_s": quantize_s, "compile_s": compile_s, "inductor_s": inductor_s,
            "agreement": {k: f"{v}/{agreement}" for k, v in agree.items()} if agreement and ref.ndim == 2 else None,
            "max_rel_diff": worst if agreement else None, "worst_cosine": cosine if agreement else None}


def _first(out):
    """The first output as NumPy (a tuple's first element, a ``ModelOutput``'s first field)."""
    import numpy as np
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (tuple, list)):
        out = out[0]
    return np.asarray(out.detach() if hasattr(out, "detach") else out)


def _worst_cosine(a, b) -> float:
    """The smallest cosine similarity between matching rows (last dim) of two outputs."""
    import numpy as np
    a, b = a.reshape(-1, a.shape[-1]).astype(np.float64), b.reshape(-1, b.shape[-1]).astype(np.float64)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float(np.min(np.sum(a * b, axis=1) / np.maximum(den, 1e-30)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet50", "mobilenet_v2"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.05)
    ap.add_argument("--agreement", type=int, default=20, help="random inputs for the top-1 agreement (0: none)")
    ap.add_argument("--dynamic", action="store_true",
                    help="X86InductorQuantizer's dynamic config: linear layers' inputs quantized at run time")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    print("| model | batch | tf-pt2e ms | inductor-pt2e ms | eager-pt2e ms | tf-f32 ms | eager-f32 ms "
          "| inductor / tf | tf f32 / tf int8 | int8 kernels | top-1 agreement tf, inductor | max rel diff tf, inductor "
          "| worst row cosine tf, inductor | compile s tf, inductor |")
    print("|" + "---|" * 14)
    for name in args.models:
        r = bench_model(name, args.batch, args.threads, args.repeats, args.block, args.pause, args.agreement, args.dynamic)
        rows.append(r)
        ms = r["ms"]
        agree = r["agreement"] or {}
        diff = r["max_rel_diff"] or {}
        cos = r["worst_cosine"] or {}
        print(f"| {name} | {args.batch} | {ms['tf-pt2e']:.2f} | {ms['inductor-pt2e']:.2f} | {ms['eager-pt2e']:.2f} "
              f"| {ms['tf-f32']:.2f} | {ms['eager-f32']:.2f} | **{ms['inductor-pt2e'] / ms['tf-pt2e']:.2f}x** "
              f"| {ms['tf-f32'] / ms['tf-pt2e']:.2f}x | {r['int8_kernels']} of {r['kernels']} "
              f"| {agree.get('tf-pt2e', '-')}, {agree.get('inductor-pt2e', '-')} "
              f"| {diff.get('tf-pt2e', float('nan')):.1e}, {diff.get('inductor-pt2e', float('nan')):.1e} "
              f"| {cos.get('tf-pt2e', float('nan')):.4f}, {cos.get('inductor-pt2e', float('nan')):.4f} "
              f"| {r['compile_s']:.1f}, {r['inductor_s']:.1f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
