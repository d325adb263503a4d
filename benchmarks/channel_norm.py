"""LayerNorm over the channels of NCHW and a ConvNeXt block: tensorforge against torch and onnxruntime.

    .venv/bin/python benchmarks/channel_norm.py                      # batch 1, 2 threads
    .venv/bin/python benchmarks/channel_norm.py --only cnx@96x56 --repeats 15
    .venv/bin/python benchmarks/channel_norm.py --before-root /tmp/base   # also the code at /tmp/base

Cases (batch 1):

* ``ln2d``: ``nn.LayerNorm(C)(x.permute(0,2,3,1)).permute(0,3,1,2)`` (timm's LayerNorm2d);
* ``manual``: ``u = x.mean(1, keepdim=True); s = (x-u).pow(2).mean(1, keepdim=True);
  (x-u)/sqrt(s+eps) * w[:,None,None] + b[:,None,None]`` (ConvNeXt's own channels_first LayerNorm);
* ``cnx``: a ConvNeXt block, ``x + gamma * (Linear(4C,C)(GELU(Linear(C,4C)(LN(dwconv7x7(x).permute(0,2,3,1))))))
  .permute(0,3,1,2)``.

Contenders, timed interleaved in one process (``tensorforge.benchmark.time_interleaved`` in blocks:
every library here keeps its threads spinning for a while after a call, so each block starts after
``--pause`` seconds and one untimed call; medians after warm-up):

* ``tf``: ``tensorforge.compile(model, (x,), threads=N)`` then ``cm(x)``;
* ``tf-nolayout`` (ConvNeXt only): the same with ``simplify-extra{norm_layout=false}``: the LayerNorm
  writes channels-last for the Linear instead of NCHW read by a transposed-operand GEMM;
* ``tf-before`` (with ``--before-root``): the model compiled by the tensorforge tree at that path
  (in a subprocess, saved as a .tfm and loaded here), e.g. the tree without this change;
* ``eager``: the torch module; ``inductor``: ``torch.compile`` of it (the first call compiles);
* ``ort``: onnxruntime on ``torch.onnx.export`` (TorchScript exporter) of the module.

Every contender's output is checked against eager (relative error 1e-4).  The machine may be shared:
``uptime``'s load average is printed before and after; compare within a row.
"""
from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time

CASES = (("ln2d", 96, 56), ("ln2d", 768, 7), ("manual", 96, 56), ("cnx", 96, 56), ("cnx", 384, 14), ("cnx", 768, 7))
DEFAULT_PIPELINE_NOLAYOUT = ("const-fold,fold-control-flow,shape-prop,dce,cse,simplify-extra{norm_layout=false},"
                             "fold-inference,trim-window,cse,dce,reorder{goal=memory}")


def build_model(kind: str, c: int):
    from tensorforge.models import convnext
    cls = {"ln2d": convnext.LayerNorm2d, "manual": convnext.LayerNorm2dManual, "cnx": convnext.ConvNeXtBlock}[kind]
    return convnext.build(cls, c)


def emit_before(kind: str, c: int, size: int, threads: int, path: str) -> None:
    """Runs in a subprocess with the --before-root tree first on sys.path: compile and save."""
    import torch

    import tensorforge
    torch.manual_seed(1)
    x = torch.randn(1, c, size, size)
    tensorforge.compile(build_model(kind, c), (x,), threads=threads).save(path, include_graph=False)


def ort_session(model, x, threads: int):
    import onnxruntime as ort
    import torch
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], opset_version=17)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    return ort.InferenceSession(buf.getvalue(), so, providers=["CPUExecutionProvider"])


def bench_case(kind: str, c: int, size: int, args) -> dict:
    import numpy as np
    import torch

    import tensorforge
    from tensorforge.benchmark import time_interleaved

    torch.set_num_threads(args.threads)
    model = build_model(kind, c)
    torch.manual_seed(1)
    x = torch.randn(1, c, size, size)
    xn = x.numpy()
    with torch.no_grad():
        ref = model(x).numpy()
    notes = []

    def check(name, out):
        err = float(np.abs(np.asarray(out) - ref).max() / max(np.abs(ref).max(), 1e-30))
        if err > 1e-4:
            raise SystemExit(f"{kind} C={c}@{size}: {name} relative error {err:.2e}")

    contenders = {}
    cm = tensorforge.compile(model, (x,), threads=args.threads)
    check("tf", cm(xn))
    contenders["tf"] = lambda: cm(xn)
    kernels = cm.source.count("static void k")
    if kind == "cnx":
        cm_nl = tensorforge.compile(model, (x,), threads=args.threads, passes=DEFAULT_PIPELINE_NOLAYOUT)
        check("tf-nolayout", cm_nl(xn))
        contenders["tf-nolayout"] = lambda: cm_nl(xn)
    if args.before_root:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "before.tfm")
            env = dict(os.environ, PYTHONPATH=args.before_root)
            subprocess.run([sys.executable, __file__, "--emit-before", kind, str(c), str(size), path,
                            "--threads", str(args.threads)], check=True, env=env, cwd=args.before_root)
            cm_b = tensorforge.load(path, threads=args.threads)
        check("tf-before", cm_b(xn))
        contenders["tf-before"] = lambda: cm_b(xn)

    def eager():
        with torch.no_grad():
            return model(x)
    contenders["eager"] = eager
    if not args.no_inductor:
        try:
            t0 = time.perf_counter()
            compiled = torch.compile(model)
            with torch.no_grad():
                check("inductor", compiled(x).numpy())

            def inductor():
                with torch.no_grad():
                    return compiled(x)
            contenders["inductor"] = inductor
            notes.append(f"inductor compile {time.perf_counter() - t0:.0f}s")
        except Exception as e:       # no C++ compiler, an unsupported op...
            notes.append(f"inductor failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    try:
        sess = ort_session(model, x, args.threads)
        check("ort", sess.run(None, {"x": xn})[0])
        contenders["ort"] = lambda: sess.run(None, {"x": xn})
    except Exception as e:
        notes.append(f"onnxruntime unavailable: {type(e).__name__}: {str(e).splitlines()[0][:80]}")
    t = time_interleaved(contenders, repeats=args.repeats, warmup=2, block=args.block, pause_s=args.pause)
    return {"case": f"{kind} C={c} {size}x{size}", "ms": {k: v.median_ms for k, v in t.items()},
            "kernels": kernels, "notes": notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--block", type=int, default=5)
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds before each contender's block: every library here (our libgomp, torch's, "
                         "onnxruntime's pool) keeps its threads spinning after a call, which on a 2-core "
                         "machine would be charged to the next contender")
    ap.add_argument("--only", nargs="*", default=None, help="cases as KIND@CxSIZE (e.g. cnx@96x56)")
    ap.add_argument("--before-root", default=None, help="a tensorforge tree to compile the 'tf-before' contender with")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--emit-before", nargs=4, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.emit_before:
        kind, c, size, path = args.emit_before
        emit_before(kind, int(c), int(size), args.threads, path)
        return
    print(f"ms, batch 1, {args.threads} thread(s), medians of {args.repeats} interleaved rounds of {args.block} "
          f"calls; load average before: {os.getloadavg()}", flush=True)
    start = time.time()
    for kind, c, size in CASES:
        if args.only and f"{kind}@{c}x{size}" not in args.only:
            continue
        r = bench_case(kind, c, size, args)
        ms = r["ms"]
        cells = "  ".join(f"{k}={v:.3f}" for k, v in ms.items())
        ratios = "  ".join(f"{k}/tf={v / ms['tf']:.2f}" for k, v in ms.items() if k != "tf")
        print(f"{r['case']:22s} kernels={r['kernels']}  {cells}\n{'':22s} {ratios}  load={os.getloadavg()[0]:.2f}"
              + (f"  ({'; '.join(r['notes'])})" if r["notes"] else ""), flush=True)
    print(f"load average after: {os.getloadavg()} ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
