"""One compiled convolution layer over a symbolic batch vs the static build at the same size.

    .venv/bin/python benchmarks/symbolic_tensorize.py [batch [reps [algorithms,comma,separated]]]
    .venv/bin/python benchmarks/symbolic_tensorize.py gemm      # attention and linear GEMMs

Builds ResNet-like conv+BN+ReLU kernels (tests/codegen/test_symbolic_tensorize.py) twice: with the
batch a symbol (hint 8, range 1..64) and with the batch fixed, lets the compiler pick the algorithm
(or forces each one), and prints the median time of each and the ratio dynamic / static.
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))   # the tests package

from tensorforge.codegen.c.tensorize import Tensorizer
from tensorforge.codegen.target import Target
from tests.codegen.test_conv_algorithms import forced_algorithm
from tests.codegen.test_symbolic_tensorize import (ATTN_SYMBOLS, KIND, KernelHarness, _applies, _batch_matmul,
                                                   _conv_bn_relu, _linear_gelu)

LAYERS = [  # (channels, size, out channels, kernel, stride): ResNet-18 layers
    (64, 56, 64, 3, 1),
    (128, 28, 128, 3, 1),
    (256, 14, 256, 3, 1),
    (512, 7, 512, 3, 1),
    (128, 56, 128, 3, 2),
    (256, 14, 512, 1, 2),
]


def _times(pair: list, x: np.ndarray, envs: list, reps: int) -> list[float]:
    """Best time of each harness over ``reps`` interleaved calls (a shared machine's noise hits
    both alike; the minimum is the least disturbed run)."""
    best = [float("inf")] * len(pair)
    for h, env in zip(pair, envs):
        h([x], env)
    for _ in range(reps):
        for i, (h, env) in enumerate(zip(pair, envs)):
            t0 = time.perf_counter()
            h([x], env)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def main(batch: int = 8, reps: int = 15, algorithms: tuple = ("default", "im2col", "fold", "direct", "winograd")) -> None:
    target = Target.host()
    print(f"batch {batch}; ms, best of {reps} interleaved; dynamic = batch symbolic (hint 8), static = batch {batch}")
    for c, hw, o, k, s in LAYERS:
        for alg in algorithms:
            if alg != "default" and not _applies(alg, k, s):
                continue
            tz = Tensorizer(target, forced_algorithm(alg).params_for if alg != "default" else None)
            dyn = KernelHarness(_conv_bn_relu(c, hw, o, k, s)[0], tz)
            sta = KernelHarness(_conv_bn_relu(c, hw, o, k, s, batch=batch)[0], tz)
            if alg != "default" and dyn.plan.kind != KIND[alg]:
                continue
            x = np.random.default_rng(0).standard_normal((batch, c, hw, hw), dtype=np.float32)
            td, ts = _times([dyn, sta], x, [{"batch": batch}, {}], reps)
            print(f"c{c} {hw}x{hw} o{o} k{k} s{s} {alg:8s} ({dyn.plan.kind}/{sta.plan.kind}): "
                  f"dynamic {td * 1e3:7.2f}  static {ts * 1e3:7.2f}  ratio {td / ts:5.2f}")


def gemms(reps: int = 15) -> None:
    """Attention's q @ k^T and a BERT-base-sized linear layer: symbolic (hint b=8, s=128) vs static."""
    print(f"GEMMs; ms, best of {reps} interleaved; dynamic = b, s symbolic (hints 8, 128)")
    qk = (lambda a, x: a[x[0], x[1], x[2], x[4]], lambda b, x: b[x[0], x[1], x[3], x[4]])
    for b, s in [(1, 8), (8, 16), (8, 128), (1, 384), (8, 384)]:
        rng = np.random.default_rng(0)
        dyn = KernelHarness(_batch_matmul(("b", 12, "s", 64), ("b", 12, "s", 64), ("b", 12, "s", "s"), 64, *qk, None))
        sta = KernelHarness(_batch_matmul((b, 12, s, 64), (b, 12, s, 64), (b, 12, s, s), 64, *qk, None))
        q = rng.standard_normal((b, 12, s, 64), dtype=np.float32)
        td, ts = _times2([dyn, sta], [q, q], [{"b": b, "s": s}] * 2, reps)
        print(f"q@k^T  b{b} s{s:4d}: dynamic {td * 1e3:8.3f}  static {ts * 1e3:8.3f}  ratio {td / ts:5.2f}")
        dyn = KernelHarness(_linear_gelu(("b", "s", 768), ATTN_SYMBOLS, 768, 768)[0])
        sta = KernelHarness(_linear_gelu((b, s, 768), [], 768, 768)[0])
        x = rng.standard_normal((b, s, 768), dtype=np.float32)
        td, ts = _times2([dyn, sta], [x], [{"b": b, "s": s}, {}], reps)
        print(f"linear b{b} s{s:4d}: dynamic {td * 1e3:8.3f}  static {ts * 1e3:8.3f}  ratio {td / ts:5.2f}")


def _times2(pair: list, inputs: list, envs: list, reps: int) -> list[float]:
    best = [float("inf")] * len(pair)
    for _ in range(reps + 1):
        for i, (h, env) in enumerate(zip(pair, envs)):
            t0 = time.perf_counter()
            h(inputs, env)
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


if __name__ == "__main__" and sys.argv[1:2] == ["gemm"]:
    gemms()
elif __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, int(sys.argv[2]) if len(sys.argv) > 2 else 15,
         tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ("default", "im2col", "fold", "direct", "winograd"))
