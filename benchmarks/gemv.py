"""Batch-1 linear layers (GEMV): memory bandwidth of the weights, tensorforge against its peers.

    .venv/bin/python benchmarks/gemv.py                    # zoo mlp and a 4096x4096 Linear, 2 and 1 threads
    .venv/bin/python benchmarks/gemv.py --models mlp --threads 1 --repeats 10
    .venv/bin/python benchmarks/gemv.py --kernel           # the C kernel alone: panel widths, streams, threads

Workloads: the zoo's ``mlp`` (784-1024-1024-10, 7.3 MB of fp32 weights) and one
``nn.Linear(4096, 4096)`` (64 MB, streamed from DRAM) at batch 1.  Contenders: tensorforge with
the GEMV path of the generated GEMM (``codegen/c/gemv.py``) and without it
(``TENSORFORGE_GEMV_MAX_M=0`` at compile time: the blocked GEMM, the "before"), torch eager,
onnxruntime (the same layers built with ``onnx.helper``: Gemm transB=1, Relu) and NumPy
(``x @ W.T + b`` per layer, OpenBLAS).  Each thread count runs in its own process whose environment
fixes OMP/OpenBLAS/MKL threads; torch and onnxruntime get the same count.  Timing is interleaved
(``time_interleaved`` in blocks, with a pause so one library's spinning pool does not tax the next)
and reported as medians, with the weight bytes per second; ``uptime``'s load is printed before and
after, since other tenants share this 2-core machine (the 1-thread rows are the steadier ones).

``--kernel`` times the generated ``*_prepacked`` entry from C (a small driver, no Python in the
loop, B on transparent huge pages as NumPy allocates a model's weights): the 10th percentile of
many calls for the GEMV against the blocked GEMM, packed panels of 8, 16 and 32 columns, 1, 2 and 4
panels streamed at once, and B sizes around ``GEMV_PARALLEL_MIN_BYTES`` on one and two threads
(threads forced, without the clock-driven back-off, to see what a parallel region costs).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tensorforge.benchmark.child import run_child

MODELS = ("mlp", "linear4096")


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def build(name: str):
    import torch
    if name == "mlp":
        from tensorforge import models
        model, inputs = models.get("mlp")
        x = inputs[0] if isinstance(inputs, (tuple, list)) else inputs
    else:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096))
        x = torch.randn(1, 4096)
    return model.eval(), x


def layers(model):
    """(weight [out, in], bias, relu after) of a stack of Linear / ReLU modules."""
    import torch
    out = []
    for mod in model.modules():
        if isinstance(mod, torch.nn.Linear):
            out.append([mod.weight.detach().numpy(), mod.bias.detach().numpy(), False])
        elif isinstance(mod, torch.nn.ReLU):
            out[-1][2] = True
    return out


def onnx_session(stack, in_features: int, threads: int):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    nodes, inits, cur = [], [], "x"
    for i, (w, b, relu) in enumerate(stack):
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Gemm", [cur, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        cur = f"g{i}"
        if relu:
            nodes.append(helper.make_node("Relu", [cur], [f"r{i}"]))
            cur = f"r{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, in_features])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, [1, stack[-1][0].shape[0]])],
                              inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0], np.float32


def child(payload: dict) -> None:
    import numpy as np
    import torch

    import tensorforge
    from tensorforge.benchmark.timing import time_interleaved
    threads = payload["threads"]
    torch.set_num_threads(threads)
    results = {}
    for name in payload["models"]:
        model, x = build(name)
        xn = x.numpy()
        stack = layers(model)
        weight_bytes = sum(w.nbytes for w, _, _ in stack)
        os.environ["TENSORFORGE_GEMV_MAX_M"] = "0"
        blocked = tensorforge.compile(model, (x,), threads=threads)
        os.environ.pop("TENSORFORGE_GEMV_MAX_M")
        fast = tensorforge.compile(model, (x,), threads=threads)
        assert "tensorforge gemv path" in fast.source and "tensorforge gemv path" not in blocked.source
        ort_run, _ = onnx_session(stack, xn.shape[1], threads)

        def numpy_run(x=xn):
            for w, b, relu in stack:
                x = x @ w.T + b
                if relu:
                    x = np.maximum(x, 0)
            return x

        def torch_run():
            with torch.no_grad():
                return model(x)

        with torch.no_grad():
            ref = model(x).numpy()
        for label, fn in (("gemv", fast), ("blocked", blocked)):
            err = float(np.max(np.abs(fn(xn) - ref)) / max(1e-30, float(np.max(np.abs(ref)))))
            assert err < 1e-4, (label, err)
        contenders = {"tensorforge": lambda: fast(xn), "tensorforge-blocked": lambda: blocked(xn),
                      "torch": torch_run, "onnxruntime": lambda: ort_run(xn), "numpy": numpy_run}
        before = load()
        timings = time_interleaved(contenders, repeats=payload["repeats"], warmup=2, block=payload["block"],
                                   pause_s=0.02)
        results[name] = {"weight_MB": weight_bytes / 1e6, "load_before": before, "load_after": load(),
                         "median_us": {k: t.median_ms * 1e3 for k, t in timings.items()},
                         "min_us": {k: t.min_ms * 1e3 for k, t in timings.items()}}
    print(json.dumps(results))


_DRIVER = r"""
#include <stdio.h>
#include <time.h>
#include <sys/mman.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void relu_cb(const void *ctx, float *c, long ldc, long i0, long j0, long rows, long cols) {
  (void)ctx; (void)i0; (void)j0;
  for (long r = 0; r < rows; r++) for (long l = 0; l < cols; l++) if (c[r * ldc + l] < 0) c[r * ldc + l] = 0;
}
int main(int argc, char **argv) {
  const long M = atol(argv[1]), N = atol(argv[2]), K = atol(argv[3]); const int reps = atoi(argv[4]);
  const long nb = (N + NR - 1) / NR * K * NR;
  float *Bp; if (posix_memalign((void **)&Bp, 1 << 21, nb * 4 + (1 << 21))) return 1;
  madvise(Bp, nb * 4, MADV_HUGEPAGE);
  float *A = tf_alloc(M * K), *C = tf_alloc(M * N);
  for (long i = 0; i < nb; i++) Bp[i] = (float)((i * 7) % 13) * 0.01f - 0.06f;
  for (long i = 0; i < M * K; i++) A[i] = 0.5f;
  double *t = malloc(sizeof(double) * reps);
  for (int r = 0; r < 5; r++) G_prepacked(M, N, K, A, K, Bp, C, N, 0, relu_cb, 0);
  for (int r = 0; r < reps; r++) { double t0 = now(); G_prepacked(M, N, K, A, K, Bp, C, N, 0, relu_cb, 0); t[r] = now() - t0; }
  qsort(t, reps, sizeof(double), cmp);
  printf("%.2f %.2f\n", t[reps / 10] * 1e6, t[reps / 2] * 1e6);
  return 0;
}
"""


def kernel_sweep() -> None:
    """The C kernel alone (see the module docstring)."""
    import shlex
    import subprocess
    import tempfile

    from tensorforge.codegen import Target
    from tensorforge.codegen.c import GemmParams, GemmSpec, gemv, generate_gemm
    host = Target.host()
    tmp = tempfile.mkdtemp(prefix="tf_gemv_")
    saved = (gemv.STREAMS, gemv.GEMV_PARALLEL_MIN_BYTES, os.environ.get("TENSORFORGE_GEMV_MAX_M"))

    def build(tag: str, nr: int = 2 * host.vector_width, streams: int = gemv.STREAMS, rows: int = gemv.GEMV_MAX_M,
              forced: bool = False, min_bytes: int = gemv.GEMV_PARALLEL_MIN_BYTES) -> str:
        gemv.STREAMS, gemv.GEMV_PARALLEL_MIN_BYTES = streams, min_bytes
        os.environ["TENSORFORGE_GEMV_MAX_M"] = str(rows)
        try:
            params = GemmParams.for_target(host, threads=1, nr=nr, mr=12 if nr <= 16 else 6)
            text = generate_gemm(params, host, GemmSpec(callback=True), name="G")
        finally:
            gemv.STREAMS, gemv.GEMV_PARALLEL_MIN_BYTES = saved[:2]
            os.environ.pop("TENSORFORGE_GEMV_MAX_M")
            if saved[2] is not None:
                os.environ["TENSORFORGE_GEMV_MAX_M"] = saved[2]
        if forced:   # every large call threaded: no clock-driven back-off
            text = text.replace("if (ser > 0 && skip <= 0) {", "if (1) {")
        src, exe = os.path.join(tmp, tag + ".c"), os.path.join(tmp, tag)
        with open(src, "w") as f:
            f.write(text + f"\n#define NR {nr}\n" + _DRIVER)
        flags = [f for f in host.cflags if f != "-shared"]
        subprocess.run([*shlex.split(host.cc), *flags, f"-march={host.march}", src, "-o", exe], check=True)
        return exe

    def run(exe: str, M: int, N: int, K: int, threads: int, reps: int) -> float:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        out = subprocess.run([exe, str(M), str(N), str(K), str(reps)], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        return float(out[0])

    print(f"load {load()}; 10th percentile of the call times, us")
    vw = host.vector_width
    variants = {"blocked": build("blocked", rows=0), **{f"nr{k * vw}": build(f"nr{k}", nr=k * vw) for k in (1, 2, 4)},
                **{f"streams{g}": build(f"s{g}", streams=g) for g in (1, 2, 4)}}
    for M, N, K, reps in ((1, 1024, 1024, 300), (4, 1024, 1024, 300), (1, 4096, 4096, 30)):
        times = {k: run(e, M, N, K, 1, reps) for k, e in variants.items()}
        print(f"M={M} N={N} K={K} ({N * K * 4 / 1e6:.1f} MB), 1 thread: "
              + "  ".join(f"{k} {v:.0f} ({N * K * 4 / v / 1e3:.1f} GB/s)" for k, v in times.items()))
    forced = build("forced", forced=True, min_bytes=1)
    serial = build("serial", min_bytes=1 << 62)
    print(f"load {load()}; threads forced on vs one thread, M=1, N=256 (10th percentile, us)")
    for K in (64, 128, 256, 512, 1024, 2048):
        two, one = run(forced, 1, 256, K, 2, 2000), run(serial, 1, 256, K, 2, 2000)
        print(f"  B {256 * K * 4 // 1024:5d} KB: 2 threads {two:7.1f}  1 thread {one:7.1f}  x{one / two:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child")
    ap.add_argument("--kernel", action="store_true", help="time the C kernel alone (variants, thresholds)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--block", type=int, default=10)
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    if args.kernel:
        kernel_sweep()
        return
    for T in (int(t) for t in args.threads.split(",")):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env.update(OMP_NUM_THREADS=str(T), OPENBLAS_NUM_THREADS=str(T), MKL_NUM_THREADS=str(T))
        env.pop("TENSORFORGE_GEMV_MAX_M", None)
        t0 = time.time()
        res = run_child(__file__, {"threads": T, "models": args.models.split(","), "repeats": args.repeats,
                                   "block": args.block}, env, f"{T} thread(s)")
        print(f"== {T} thread(s)  ({time.time() - t0:.0f} s)")
        for name, r in res.items():
            print(f"{name}: {r['weight_MB']:.1f} MB of weights; load {r['load_before']} -> {r['load_after']}")
            base = r["median_us"]["tensorforge"]
            for k, us in sorted(r["median_us"].items(), key=lambda kv: kv[1]):
                gbs = r["weight_MB"] * 1e6 / (us * 1e-6) / 1e9
                print(f"  {k:20s} median {us:9.1f} us  min {r['min_us'][k]:9.1f} us  {gbs:6.1f} GB/s  "
                      f"tensorforge speedup x{us / base:.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
