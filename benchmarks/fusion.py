"""Kernel fusion, side by side with torch eager and torch.compile (Inductor, CPU), in one run.

    .venv/bin/python benchmarks/fusion.py                          # everything (tens of minutes)
    .venv/bin/python benchmarks/fusion.py --only counts            # kernel counts of the zoo, no C
    .venv/bin/python benchmarks/fusion.py --only ln,softmax --repeats 30
    .venv/bin/python benchmarks/fusion.py --only zoo --models bert_base --json out.json

Sections:

- ``bandwidth``: the machine's memory bandwidth, measured (a NumPy and a torch copy of a 100 MB
  array: bytes read + written per second);
- ``counts``: kernels of each zoo model after the default graph pipeline, without fusion (one
  kernel per graph op) and with it, plus the same without BatchNorm folding for the CNNs;
- ``ln``: LayerNorm + GELU + residual add over 64x512x768 (``x + gelu(layer_norm(x))``);
- ``softmax``: softmax over 64x12x128x128, as the one ``graph.softmax`` op and written out op by
  op (max, sub, exp, sum, div: what fusion has to put back together);
- ``zoo``: each zoo model end to end (batch 1), tensorforge with and without fusion (``--libm``:
  also fused with the C library's exp/erf).

``ln`` and ``softmax`` also time the fused kernel built with the C library's ``expf``/``erff``
(``codegen.c.vmath.libm_math``) instead of the inline vectorizable ones: the code before issue #6's
inline math, in the same rounds.

For ``ln`` and ``softmax`` the GB/s column counts the bytes a perfect kernel moves (the input read
once, the output written once).  ``% of bandwidth`` compares with a copy of the input into a
buffer of the same size (torch ``copy_``, the same bytes read and written), timed in the same
interleaved rounds so that it sees the same machine: 100% is memory-bound at copy speed.  Both
the medians and the best rounds are compared.  Times are medians of
interleaved rounds (``tensorforge.benchmark.time_interleaved``) on ``--threads`` threads for every
contender; the machine is shared and noisy, so compare within one run, not across runs (the load
average is printed with each section).  This is a benchmark, not a test.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tensorforge  # noqa: E402
from tensorforge.benchmark import time_interleaved  # noqa: E402
from tensorforge.codegen.c.vmath import libm_math  # noqa: E402
from tensorforge.ir import Module, tensor  # noqa: E402
from tensorforge.passes.fusion import fuse_function  # noqa: E402
from tensorforge.passes.lower.graph_to_kernels import fusion_default, lower_ops  # noqa: E402
from tensorforge.passes.pipeline import default_pipeline_text, optimize  # noqa: E402

ZOO = ("resnet50", "mobilenet_v2", "bert_base", "gpt2_small")
COPY = "memory copy (bandwidth yardstick)"
SECTIONS = ("bandwidth", "counts", "ln", "softmax", "zoo")


def load() -> str:
    return "load %.1f" % os.getloadavg()[0]


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """``cols``: (key, header, format)."""
    cells = [[h for _, h, _ in cols]] + [[("" if r.get(k) is None else format(r[k], f)) for k, _, f in cols]
                                         for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(cols))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths)))
             for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---- bandwidth ---------------------------------------------------------------------------------------
def bandwidth(args) -> float:
    import torch
    x = np.random.default_rng(0).standard_normal(25 * 1 << 20).astype(np.float32)
    y = np.empty_like(x)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    t = time_interleaved({"numpy copy": lambda: np.copyto(y, x), "torch copy": lambda: ty.copy_(tx)},
                         repeats=args.repeats, warmup=2, budget_s=30)
    best = min(v.median_ms for v in t.values())
    gbs = 2 * x.nbytes / best / 1e6
    print(f"\n== memory bandwidth ({load()}, {args.threads} threads)")
    for k, v in t.items():
        print(f"  {k:<11} {v.median_ms:8.2f} ms  {2 * x.nbytes / v.median_ms / 1e6:6.2f} GB/s")
    print(f"  measured bandwidth: {gbs:.2f} GB/s (read + write)")
    return gbs


# ---- kernel counts -----------------------------------------------------------------------------------
def import_zoo(name: str):
    from tensorforge import models
    module, inputs = models.get(name)
    return module, inputs, tensorforge.import_model(module, inputs)


def kernel_counts(name: str, graph, pipeline: str | None) -> dict:
    m = graph.clone()
    if pipeline:
        optimize(m, None, pipeline)
    ops = sum(1 for op in m.main.body if op.name not in ("graph.constant", "func.return"))
    plain = m.clone()
    unfused = lower_ops(plain.main)
    t0 = time.perf_counter()
    log = fuse_function(m.main)
    return {"model": name, "graph ops": ops, "unfused": unfused, "fused": log.kernels_after,
            "fusions": len(log.fused), "rejected": len(log.rejected), "fuse ms": (time.perf_counter() - t0) * 1e3}


def counts(args, graphs: dict) -> list[dict]:
    rows = []
    no_bn_folding = default_pipeline_text().replace("fold-inference,", "")
    for name in args.models:
        rows.append(kernel_counts(name, graphs[name][2], default_pipeline_text()))
        if name in ("resnet50", "mobilenet_v2"):
            rows.append(kernel_counts(name + " (BN unfolded)", graphs[name][2], no_bn_folding))
    print(f"\n== kernels per model (default graph pipeline; {load()})")
    print(table(rows, [("model", "model", ""), ("graph ops", "graph ops", "d"), ("unfused", "kernels unfused", "d"),
                       ("fused", "kernels fused", "d"), ("fusions", "fusions", "d"), ("rejected", "rejected", "d"),
                       ("fuse ms", "fusion ms", ".0f")]))
    return rows


# ---- memory-bound cases ------------------------------------------------------------------------------
def graph_module(shapes, build):
    m = Module()
    f = m.add_function("main", [tensor(s) for s in shapes])
    outs = build(f.builder().graph, *f.args)
    f.set_return(list(outs) if isinstance(outs, (list, tuple)) else [outs])
    return m


def compile_modes(m, threads, libm: bool = True, passes=False) -> dict:
    """mode -> (compiled model, build seconds): fused ("fuse"), unfused ("none") and, with ``libm``,
    fused with the C library's exp/erf ("libm")."""
    out = {}
    for mode in ("fuse", "none") + (("libm",) if libm else ()):
        t0 = time.perf_counter()
        with fusion_default("none" if mode == "none" else "fuse"):
            if mode == "libm":
                with libm_math():
                    cm = tensorforge.compile(m, passes=passes)
            else:
                cm = tensorforge.compile(m, passes=passes)
        cm.set_threads(threads)
        out[mode] = (cm, time.perf_counter() - t0)
    return out


def memory_bound(title: str, args, m, inputs, torch_fns: dict, ideal_bytes: int) -> list[dict]:
    import torch
    cms = {mode: cm for mode, (cm, _) in compile_modes(m, args.threads).items()}
    outs = {k: np.empty(cm.output_types[0].shape, np.float32) for k, cm in cms.items()}
    want = cms["none"](*inputs)
    np.testing.assert_allclose(cms["fuse"](*inputs), want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(cms["libm"](*inputs), want, rtol=1e-4, atol=1e-4)
    targs = [torch.from_numpy(x) for x in inputs]
    copy_src, copy_dst = torch.from_numpy(inputs[0]), torch.from_numpy(np.empty_like(inputs[0]))
    contenders = {COPY: lambda: copy_dst.copy_(copy_src),
                  f"tensorforge fused ({cms['fuse'].native.build['kernels']} kernels)":
                  lambda: cms["fuse"].run(*inputs, out=[outs["fuse"]]),
                  f"tensorforge unfused ({cms['none'].native.build['kernels']} kernels)":
                  lambda: cms["none"].run(*inputs, out=[outs["none"]]),
                  "tensorforge fused, libm exp/erf": lambda: cms["libm"].run(*inputs, out=[outs["libm"]])}
    for name, fn in torch_fns.items():
        with torch.no_grad():
            got = fn(*targs)
        err = float(np.abs(got.numpy() - want).max())
        assert err < 1e-3, f"{name} disagrees with tensorforge by {err}"
        contenders[name] = (lambda fn=fn: _no_grad(fn, targs))
    t = time_interleaved(contenders, repeats=args.repeats, warmup=3, budget_s=args.budget)
    rows = []
    copy = t[COPY]
    for k, v in t.items():
        rows.append({"case": title, "contender": k, "ms": v.median_ms, "best ms": v.min_ms,
                     "GB/s": ideal_bytes / v.median_ms / 1e6,
                     "% bw": 100 * copy.median_ms / v.median_ms, "% bw best": 100 * copy.min_ms / v.min_ms})
    print(f"\n== {title} ({load()}, {args.threads} threads, ideal traffic {ideal_bytes / 1e6:.0f} MB)")
    print(table(rows, [("contender", "contender", ""), ("ms", "median ms", ".2f"), ("best ms", "best ms", ".2f"),
                       ("GB/s", "GB/s (median)", ".2f"), ("% bw", "% of copy speed", ".0f"),
                       ("% bw best", "% (best rounds)", ".0f")]))
    return rows


def _no_grad(fn, targs):
    import torch
    with torch.no_grad():
        return fn(*targs)


def _inductor(fn, targs):
    import torch
    compiled = torch.compile(fn)
    with torch.no_grad():
        compiled(*targs)
    return compiled


def case_ln(args) -> list[dict]:
    import torch
    import torch.nn.functional as F
    shape = (64, 512, 768)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, 768).astype(np.float32)
    shift = rng.standard_normal(768).astype(np.float32)

    def build(g, xv):
        return g.add(g.gelu(g.layer_norm(xv, g.constant(scale), g.constant(shift), axis=-1, epsilon=1e-5)), xv)
    ts, tb = torch.from_numpy(scale), torch.from_numpy(shift)

    def torch_fn(xt):
        return xt + F.gelu(F.layer_norm(xt, (768,), ts, tb, 1e-5))
    fns = {"torch eager": torch_fn, "torch.compile (inductor)": _inductor(torch_fn, [torch.from_numpy(x)])}
    return memory_bound("LayerNorm + GELU + residual, 64x512x768", args, graph_module([shape], build), [x],
                        fns, 2 * x.nbytes)


def case_softmax(args) -> list[dict]:
    import torch
    shape = (64, 12, 128, 128)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)

    def torch_fn(xt):
        return torch.softmax(xt, dim=-1)
    fns = {"torch eager": torch_fn, "torch.compile (inductor)": _inductor(torch_fn, [torch.from_numpy(x)])}
    rows = memory_bound("softmax (graph.softmax), 64x12x128x128", args,
                        graph_module([shape], lambda g, v: g.softmax(v, axis=-1)), [x], fns, 2 * x.nbytes)

    def decomposed(g, v):
        e = g.exp(g.sub(v, g.reduce_max(v, axes=(-1,), keepdims=True)))
        return g.div(e, g.reduce_sum(e, axes=(-1,), keepdims=True))
    rows += memory_bound("softmax written out (max, sub, exp, sum, div), 64x12x128x128", args,
                         graph_module([shape], decomposed), [x], {}, 2 * x.nbytes)
    return rows


# ---- zoo end to end ----------------------------------------------------------------------------------
def zoo(args, graphs: dict) -> list[dict]:
    import torch
    rows = []
    for name in args.models:
        module, inputs, graph = graphs[name]
        np_inputs = [x.numpy() for x in inputs]
        builds = compile_modes(graph, args.threads, libm=args.libm, passes=None)
        with torch.no_grad():
            ref = module(*inputs)
        ref = ref[0] if isinstance(ref, (tuple, list)) else ref
        ref = (next(iter(ref.values())) if isinstance(ref, dict) else ref).numpy()
        errs = {}
        for mode, (cm, _) in builds.items():
            out = cm(*np_inputs)
            out = out[0] if isinstance(out, tuple) else out
            errs[mode] = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
        contenders = {"fused": lambda: builds["fuse"][0](*np_inputs),
                      "unfused": lambda: builds["none"][0](*np_inputs),
                      **({"fused libm": lambda: builds["libm"][0](*np_inputs)} if args.libm else {}),
                      "torch eager": lambda: _no_grad(module, inputs)}
        if not args.no_inductor:
            compiled = _inductor(module, inputs)
            contenders["inductor"] = lambda: _no_grad(compiled, inputs)
        t = time_interleaved(contenders, repeats=args.repeats, warmup=2, budget_s=args.budget)
        row = {"model": name, "kernels fused": builds["fuse"][0].native.build["kernels"],
               "kernels unfused": builds["none"][0].native.build["kernels"],
               "fused ms": t["fused"].median_ms, "unfused ms": t["unfused"].median_ms,
               "libm ms": t["fused libm"].median_ms if "fused libm" in t else None,
               "eager ms": t["torch eager"].median_ms,
               "inductor ms": t["inductor"].median_ms if "inductor" in t else None,
               "speedup": t["unfused"].median_ms / t["fused"].median_ms,
               "err": max(errs.values()), "build s": builds["fuse"][1]}
        rows.append(row)
        print(f"  {name}: {row}", flush=True)
    print(f"\n== zoo end to end, batch 1 ({load()}, {args.threads} threads)")
    print(table(rows, [("model", "model", ""), ("kernels unfused", "kernels unfused", "d"),
                       ("kernels fused", "fused", "d"), ("unfused ms", "unfused ms", ".2f"),
                       ("fused ms", "fused ms", ".2f"), ("libm ms", "fused, libm exp/erf ms", ".2f"),
                       ("speedup", "fusion speedup", ".2f"),
                       ("eager ms", "torch eager ms", ".2f"), ("inductor ms", "inductor ms", ".2f"),
                       ("err", "max rel err", ".1e"), ("build s", "build s", ".0f")]))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated sections of {SECTIONS}")
    p.add_argument("--models", default=",".join(ZOO))
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of timing per case at most")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile for the zoo models")
    p.add_argument("--libm", action="store_true", help="zoo: also time fused builds with the C library's exp/erf")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    only = set(args.only.split(","))
    import torch
    torch.set_num_threads(args.threads)
    print(f"tensorforge fusion benchmark: {len(os.sched_getaffinity(0))} cores, {args.threads} threads, {load()}")
    report: dict = {}
    if "bandwidth" in only:
        report["bandwidth_gbs"] = bandwidth(args)
    graphs = {name: import_zoo(name) for name in args.models} if only & {"counts", "zoo"} else {}
    if "counts" in only:
        report["counts"] = counts(args, graphs)
    if "ln" in only:
        report["ln"] = case_ln(args)
    if "softmax" in only:
        report["softmax"] = case_softmax(args)
    if "zoo" in only:
        report["zoo"] = zoo(args, graphs)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
