"""Find the first CUDA launch that writes a non-finite value (a debugging aid for a real GPU).

Compiles zoo models for ``target="cuda"``, checks their outputs against torch (CPU), then reruns
each model one launch at a time with the arena and scratch cleared to zero, copying the
intermediates back after every launch, and names the first launch after which a NaN or Inf
appears where none was.  With ``--out DIR`` it saves that launch's kernel source and the
intermediates before and after it.

    python benchmarks/cuda_nan_probe.py --models bert_tiny,bert_base --out build/nan_probe
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from gpu_models import as_numpy_list  # noqa: E402  (the benchmarks folder is the script's own)


def _runtime(cm):
    for holder in (cm, getattr(cm, "native", None)):
        rt = getattr(holder, "_runtime", None)
        if rt is not None:
            return rt
    raise SystemExit("no CUDA runtime on the compiled model (no GPU?)")


def _nonfinite(host: np.ndarray) -> np.ndarray:
    view = host[: host.nbytes // 4 * 4].view(np.float32)
    return ~np.isfinite(view)


def probe(rt, inputs, fill: int, out_dir: str | None, name: str) -> dict:
    """Launch by launch with arena+scratch set to byte ``fill``: the first launch that adds a
    non-finite float in the intermediates or outputs (and the model's outputs at the end)."""
    from tensorforge.runtime.cuda import _Call
    drv, lay = rt._drv, rt.layout
    base = int(rt._base)
    start, end = lay.arena, lay.total
    call = _Call()
    for i, x in enumerate(inputs):
        rt._place_input(call, i, x.numpy())
    results = rt._place_outputs(call, None)
    rt._check(drv.cuCtxSetCurrent(rt._ctx), "ctx")
    rt._check(drv.cuMemsetD8(base + start, fill, lay.inputs[0] - start if lay.inputs else end - start), "memset")
    rt._check(drv.cuStreamSynchronize(rt.stream), "sync")
    rt._copy_in(call)
    host = np.empty(end - start, np.uint8)
    rt._check(drv.cuMemcpyDtoH(host.ctypes.data, base + start, host.nbytes), "copy")
    bad = _nonfinite(host)
    first = None
    for n, (launch, function, (_, addresses)) in enumerate(rt._params(call.inputs, call.outputs)):
        before = host.copy()
        rt._check(drv.cuLaunchKernel(function, *launch.grid, *launch.block, 0, rt.stream, addresses, 0),
                  "launch", launch.kernel)
        rt._check(drv.cuStreamSynchronize(rt.stream), "sync", launch.kernel)
        rt._check(drv.cuMemcpyDtoH(host.ctypes.data, base + start, host.nbytes), "copy")
        now = _nonfinite(host)
        new = now & ~bad
        if first is None and new.any():
            where = np.flatnonzero(new)
            first = {"launch": n, "kernel": launch.kernel, "grid": launch.grid, "block": launch.block,
                     "args": [(a.region, a.offset, a.index) for a in launch.args], "new_nonfinite": int(new.sum()),
                     "first_float_offsets_from_arena": [int(w) for w in where[:20]]}
            if out_dir:
                info = rt.program.kernels.get(launch.kernel)
                with open(os.path.join(out_dir, f"{name}_fill{fill}_kernel.cu"), "w") as f:
                    f.write(info.source if info else rt.program.source)
                if host.nbytes < 8 << 20:
                    np.savez_compressed(os.path.join(out_dir, f"{name}_fill{fill}_state.npz"), before=before, after=host)
        bad = now
    rt._copy_out(call)
    rt._check(drv.cuStreamSynchronize(rt.stream), "sync")
    return {"fill": fill, "first_bad_launch": first, "launches": len(rt.program.launches),
            "layout": {"arena": lay.arena, "scratch": lay.scratch, "inputs": list(lay.inputs),
                       "outputs": list(lay.outputs), "total": lay.total},
            "outputs_nonfinite": [int((~np.isfinite(r)).sum()) for r in results]}


def main() -> None:
    import torch
    import tensorforge
    from tensorforge import models
    from tensorforge.benchmark.stats import max_rel_err
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="bert_tiny,gpt2_tiny,bert_base,gpt2_small")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    report = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        module, inputs = models.get(name)
        with torch.no_grad():
            refs = as_numpy_list(module(*inputs))
        cm = tensorforge.compile(module, inputs, target="cuda")
        row = {"model": name, "compile_s": time.perf_counter() - t0}
        outs = as_numpy_list(cm(*inputs))
        row["numpy_in"] = [{"nonfinite": int((~np.isfinite(o)).sum()), "size": int(o.size),
                            "rel_err": max_rel_err(np.nan_to_num(o), r)} for o, r in zip(outs, refs)]
        if torch.cuda.is_available():
            outs = as_numpy_list(cm(*(x.cuda() for x in inputs)))
            row["torch_cuda_in"] = [{"nonfinite": int((~np.isfinite(o)).sum()),
                                     "rel_err": max_rel_err(np.nan_to_num(o), r)} for o, r in zip(outs, refs)]
        rt = _runtime(cm)
        for fill in (0, 0xFF):
            try:
                row[f"probe_{fill}"] = probe(rt, inputs, fill, args.out, name)
            except Exception as exc:       # a probe must not stop the others
                row[f"probe_{fill}"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(row), flush=True)
        report.append(row)
    if args.out:
        with open(os.path.join(args.out, "nan_probe.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
