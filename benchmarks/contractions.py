"""Tensorized contractions against the peers, in one process (not a test; prints a table).

    .venv/bin/python benchmarks/contractions.py                  # kernels + the whole zoo
    .venv/bin/python benchmarks/contractions.py --kernels        # only the three kernels
    .venv/bin/python benchmarks/contractions.py --models resnet50 bert_base
    .venv/bin/python benchmarks/contractions.py --threads 1     # every contender on one thread

1. the 1024^3 fp32 GEMM through ``tensorforge.compile`` (both operands inputs, and B a
   constant packed at compile time) against NumPy's BLAS (``np.matmul`` into a preallocated out);
2. ResNet-50's 3x3 conv (1x64x56x56, 64 filters, pad 1) against ``torch.nn.functional.conv2d``;
3. a 768x768 linear at batch 128 (BERT-base's projections) against ``torch.nn.functional.linear``;
4. every zoo model at batch 1, end to end, against torch eager (``torch.no_grad``).

Contenders are timed interleaved (``time_interleaved``: A B A B ...) so that a slow spell of the
shared machine hits both; each line gives the medians, their ratio, and the spread of each
contender's samples (interquartile range / median) as a measure of how noisy the run was.
On a shared 2-core machine a 2-thread parallel region waits whole scheduler slices for a
descheduled thread, so ``--threads 1`` gives the steadier comparison.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _threads_from_argv() -> int | None:
    """``--threads N`` is read before NumPy loads: OpenBLAS takes its thread count at load time."""
    for i, a in enumerate(sys.argv[:-1]):
        if a == "--threads":
            return int(sys.argv[i + 1])
    return None


THREADS = _threads_from_argv()
if THREADS:
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(THREADS)
# OpenBLAS reads these at load time too: a pinned older core type (this workplace sets Haswell)
# would make the NumPy peer run AVX2 kernels on an AVX-512 machine (half its speed here)
for _override in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_override, None)

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorforge  # noqa: E402
from tensorforge.benchmark.timing import Timing, time_interleaved  # noqa: E402
from tensorforge.codegen import Target  # noqa: E402


def spread(t: Timing) -> float:
    """Interquartile range over median, in percent."""
    if len(t.samples) < 4:
        return float("nan")
    q = statistics.quantiles(t.samples, n=4)
    return 100.0 * (q[2] - q[0]) / statistics.median(t.samples)


def report(title: str, results: dict[str, Timing], ours: str, peer: str, flops: float | None = None) -> float:
    a, b = results[ours], results[peer]
    ratio = b.median_ms / a.median_ms
    extra = ""
    if flops:
        extra = f"  {flops / a.median_ms / 1e6:7.1f} vs {flops / b.median_ms / 1e6:7.1f} GFLOP/s"
    print(f"{title:34s} {ours} {a.median_ms:9.3f} ms (±{spread(a):4.0f}%)  {peer} {b.median_ms:9.3f} ms "
          f"(±{spread(b):4.0f}%)  speed {ours}/{peer} = {ratio:5.2f}x{extra}", flush=True)
    return ratio


def gemm_1024(repeats: int) -> None:
    from tensorforge.ir import DType, Module, tensor
    n = 1024
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n), dtype=np.float32)
    B = rng.standard_normal((n, n), dtype=np.float32)

    def module(const_b: bool):
        m = Module()
        f = m.add_function("main", [tensor((n, n), DType.f32)] * (1 if const_b else 2))
        b = f.builder()
        rhs = b.graph.constant(B) if const_b else f.args[1]
        f.set_return([b.create("graph.matmul", [f.args[0], rhs]).results[0]])
        return m

    both = tensorforge.compile(module(False), threads=THREADS)
    const = tensorforge.compile(module(True), threads=THREADS)
    out, o1, o2 = np.empty((n, n), np.float32), [np.empty((n, n), np.float32)], [np.empty((n, n), np.float32)]
    ref = A.astype(np.float64) @ B
    for cm, args, o in ((both, (A, B), o1), (const, (A,), o2)):
        cm.run(*args, out=o)
        assert np.allclose(o[0], ref, rtol=1e-3, atol=1e-2)
    res = time_interleaved({"numpy": lambda: np.matmul(A, B, out=out),
                            "tf": lambda: both.run(A, B, out=o1),
                            "tf(const B)": lambda: const.run(A, out=o2)}, repeats=repeats, warmup=2)
    flops = 2.0 * n ** 3
    report("GEMM 1024^3 (A, B inputs)", res, "tf", "numpy", flops)
    report("GEMM 1024^3 (B packed at compile)", res, "tf(const B)", "numpy", flops)


def torch_kernel(title: str, module, x, repeats: int) -> None:
    import torch
    cm = tensorforge.compile(module, (x,), threads=THREADS)
    with torch.no_grad():
        ref = module(x)
    got = cm(x)
    assert torch.allclose(got, ref, rtol=1e-3, atol=1e-3), float((got - ref).abs().max())

    def eager():
        with torch.no_grad():
            module(x)

    res = time_interleaved({"tf": lambda: cm(x), "torch": eager}, repeats=repeats, warmup=2)
    report(title, res, "tf", "torch")


def kernels(repeats: int) -> None:
    import torch
    torch.manual_seed(0)
    gemm_1024(repeats)
    conv = torch.nn.Conv2d(64, 64, 3, padding=1, bias=False).eval()
    torch_kernel("ResNet-50 conv 3x3 1x64x56x56->64", conv, torch.randn(1, 64, 56, 56), repeats)
    lin = torch.nn.Linear(768, 768).eval()
    torch_kernel("linear 768x768, batch 128", lin, torch.randn(128, 768), repeats)


def zoo(names: list[str], repeats: int, budget_s: float) -> None:
    import torch
    from tensorforge.models import get
    ratios = []
    for name in names:
        module, inputs = get(name, batch=1)
        t0 = time.perf_counter()
        try:
            cm = tensorforge.compile(module, inputs, threads=THREADS)
        except Exception as exc:     # report and go on: one broken model must not hide the others
            print(f"{name}: compile failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        compile_s = time.perf_counter() - t0
        with torch.no_grad():
            ref = module(*inputs)
        got = cm(*inputs)
        ref = ref if isinstance(ref, tuple) else (ref,)
        got = got if isinstance(got, tuple) else (got,)
        err = max(float((g - r).abs().max() / (r.abs().max() + 1e-6)) for g, r in zip(got, ref))

        def eager():
            with torch.no_grad():
                module(*inputs)

        res = time_interleaved({"tf": lambda: cm(*inputs), "torch": eager}, repeats=repeats, warmup=1,
                               budget_s=budget_s)
        ratios.append(report(f"{name} (compile {compile_s:4.1f}s, err {err:.0e})", res, "tf", "torch"))
    if ratios:
        print(f"zoo: geometric mean speed tf/torch = {float(np.exp(np.mean(np.log(ratios)))):.2f}x, "
              f"slowest {min(ratios):.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernels", action="store_true", help="only the three kernel benchmarks")
    ap.add_argument("--models", nargs="*", help="zoo models (default: all)")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--budget", type=float, default=30.0, help="seconds of timing per model at most")
    ap.add_argument("--threads", type=int, help="threads for every contender (default: all cores)")
    args = ap.parse_args()
    import torch
    target = Target.host()
    torch.set_num_threads(THREADS or target.cores)
    print(f"target {target.key()}, {target.cores} cores, running on {THREADS or target.cores}; torch {torch.__version__} on {torch.get_num_threads()} "
          f"threads; load average {os.getloadavg()[0]:.1f}", flush=True)
    if args.models is None or args.kernels:
        kernels(args.repeats)
    if not args.kernels:
        from tensorforge.models import names
        zoo(args.models or names(), max(5, args.repeats // 2), args.budget)


if __name__ == "__main__":
    main()
