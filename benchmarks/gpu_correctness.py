"""The GPU backends checked on the full models, on this machine (no GPU needed):

- **OpenCL**: every zoo model and the onnx package's nine ``light_*`` CNNs compiled with
  ``target="opencl"`` and run on the OpenCL driver here (PoCL on the CPU), against torch (zoo) or
  onnxruntime (light models, seeded random weights, logits) and against the C backend: max error
  relative to the largest reference value, target 1e-4;
- **CUDA**: the same models compiled with ``target="cuda"`` (NVRTC, sm_90): kernels, the largest
  register count, spills and static shared memory per kernel from ptxas, and every limit of the
  H200 a kernel breaks (``check_resources``).

    .venv/bin/python benchmarks/gpu_correctness.py                       # everything (~15 min)
    .venv/bin/python benchmarks/gpu_correctness.py --models resnet50,light_vgg19 --skip-opencl
    .venv/bin/python benchmarks/gpu_correctness.py --json gpu_correctness.json

Each model runs in a subprocess (a PoCL crash or a stuck kernel costs one row, not the run).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]


def _rel(got, want) -> float:
    import numpy as np
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def _first(out):
    import numpy as np
    out = out[0] if isinstance(out, (tuple, list)) else out
    return out.detach().cpu().numpy() if hasattr(out, "detach") else np.asarray(out)


def _zoo_case(name: str):
    """(compile argument, inputs, reference outputs) of a zoo model."""
    import torch
    from tensorforge.models import get
    module, inputs = get(name)
    with torch.no_grad():
        ref = _first(module(*inputs))
    return module, inputs, ref, "torch"


def _light_case(name: str):
    """A light_* model with seeded random weights and its logits from onnxruntime."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    sys.path.insert(0, os.path.dirname(__file__))
    from light_models_native import randomize, strip_final_softmax
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    model = onnx.load(os.path.join(folder, f"{name}.onnx"))
    rng = np.random.default_rng(0)
    randomize(model, rng)
    strip_final_softmax(model)
    weights = {i.name for i in model.graph.initializer}
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in model.graph.input if i.name not in weights}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)[0]
    return model, list(feeds.values()), ref, "onnxruntime"


def check_one(name: str, opencl: bool, cuda: bool) -> dict:
    """One model's row (runs in the worker process)."""
    import tensorforge
    model, inputs, ref, ref_name = _light_case(name) if name.startswith("light_") else _zoo_case(name)
    row: dict = {"model": name, "reference": ref_name}
    t0 = time.perf_counter()
    cpu = _first(tensorforge.compile(model, inputs, db=None)(*inputs))
    row["c_rel_err"] = _rel(cpu, ref)
    row["c_compile_and_run_s"] = round(time.perf_counter() - t0, 1)
    if opencl:
        t0 = time.perf_counter()
        cm = tensorforge.compile(model, inputs, target="opencl", db=None)
        row["opencl_compile_s"] = round(time.perf_counter() - t0, 1)
        t0 = time.perf_counter()
        got = _first(cm(*inputs))
        row["opencl_first_run_s"] = round(time.perf_counter() - t0, 1)
        row["opencl_rel_err"] = _rel(got, ref)
        row["opencl_vs_c_rel_err"] = _rel(got, cpu)
        row["opencl_kernels"] = len(cm.native.program.kernels)
        row["opencl_launches"] = len(cm.native.program.launches)
    if cuda:
        from tensorforge.codegen.cuda.nvrtc import check_resources
        t0 = time.perf_counter()
        cm = tensorforge.compile(model, inputs, target="cuda", db=None)
        row["cuda_compile_s"] = round(time.perf_counter() - t0, 1)
        kernels = cm.native.program.kernels
        res = {k: v.resources for k, v in kernels.items()}
        row["cuda_kernels"] = len(kernels)
        row["cuda_max_registers"] = max((r.get("registers", 0) for r in res.values()), default=0)
        row["cuda_spill_bytes"] = sum(r.get("spill_stores", 0) + r.get("spill_loads", 0) for r in res.values())
        row["cuda_max_shared_bytes"] = max((v.shared_bytes for v in kernels.values()), default=0)
        row["cuda_max_threads"] = max((v.threads for v in kernels.values()), default=0)
        row["cuda_problems"] = check_resources(cm.native.binary.resources, cm.native.target,
                                               {k: v.threads for k, v in kernels.items()})
    return row


def _worker(name: str, opencl: bool, cuda: bool, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", name] + (["--skip-opencl"] if not opencl else []) \
        + (["--skip-cuda"] if not cuda else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "error": f"timed out after {timeout:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"model": name, "error": f"exit {proc.returncode}: {' | '.join(tail)}"}


def _table(rows: list[dict]) -> str:
    head = ("| model | C rel err | OpenCL rel err | OpenCL vs C | OpenCL compile s | CUDA kernels | max regs | "
            "spill B | max smem B | CUDA limits |\n|---|---|---|---|---|---|---|---|---|---|")
    out = [head]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | error: {r['error']} |||||||||")
            continue

        def f(key, fmt="{:.1e}"):
            return fmt.format(r[key]) if key in r else "-"
        problems = "ok" if not r.get("cuda_problems") else "; ".join(r["cuda_problems"])[:80]
        out.append(f"| {r['model']} | {f('c_rel_err')} | {f('opencl_rel_err')} | {f('opencl_vs_c_rel_err')} | "
                   f"{f('opencl_compile_s', '{}')} | {f('cuda_kernels', '{}')} | {f('cuda_max_registers', '{}')} | "
                   f"{f('cuda_spill_bytes', '{}')} | {f('cuda_max_shared_bytes', '{}')} | "
                   f"{problems if 'cuda_kernels' in r else '-'} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=None, help="comma-separated zoo names and light_* names (default: all)")
    ap.add_argument("--skip-opencl", action="store_true")
    ap.add_argument("--skip-cuda", action="store_true")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per model")
    ap.add_argument("--json", default=None, metavar="PATH")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(check_one(args.worker, not args.skip_opencl, not args.skip_cuda)))
        return 0
    from tensorforge.models import names
    chosen = args.models.split(",") if args.models else names() + [f"light_{n}" for n in LIGHT]
    rows = []
    for name in chosen:
        row = _worker(name, not args.skip_opencl, not args.skip_cuda, args.timeout)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    print(_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
