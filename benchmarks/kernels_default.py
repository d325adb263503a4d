"""Default schedules of non-GEMM kernels against the previous default and against torch / NumPy.

    .venv/bin/python benchmarks/kernels_default.py                   # every kernel, 1 and 2 threads
    .venv/bin/python benchmarks/kernels_default.py --only softmax,layer_norm --rounds 9

For each kernel kind (elementwise and broadcast chains, reductions over inner and outer axes,
softmax, norms, pooling, depthwise convolution, data movement, cumsum, attention; a 256^3 matmul
shows the contraction hook's default) the table gives GB/s (compulsory traffic: every input read
once, the output written once, divided by the time) or GFLOP/s, for:

- ``new``: ``tensorforge.schedule.default_schedule`` (this module's subject),
- ``old``: the naive schedule it replaced (outer loop parallel, innermost loop vectorized),
- ``torch``: the same op in torch eager, ``numpy``: in NumPy where it has one.

The ceiling is a plain copy of 64 MiB (``numpy``: one thread; ``torch``: ``copy_``, T threads).

Kernels are scheduled for the host's cores, as ``tensorforge.compile`` does (the thread count is a
run-time setting); each thread count runs in a fresh subprocess (OMP_NUM_THREADS is read once
when OpenMP starts; torch gets ``set_num_threads``). The machine is shared
and noisy: each round times all variants of a kernel back to back (in a rotating order, each after
waiting up to 1 s for no more runnable tasks than we use), each as the fastest of a few calls (the call other tenants did not preempt); every number is the median of that over
``--rounds`` rounds, and the ``noise`` column is the spread of the ``new`` column over rounds
((p75 - p25) / median).  Arrays start at fixed offsets in their pages (see ``placed``); even so,
two buffers holding identical code and data can differ by ~30% (page placement), so new/old
ratios near 1 on kernels whose code did not change are noise.  ``cpu`` repeats new/torch on CPU time (process CPU time / threads, median
per round), which preemption does not inflate.  Outputs of ``new`` are checked against torch.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

from tensorforge.benchmark.child import run_child
from dataclasses import dataclass, field
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Case:
    """One kernel: a graph op (or a structured kernel), its torch / NumPy equivalents."""

    name: str
    kind: str
    op: str | None                      # graph op name, or None when ``kernel`` builds the structured kernel
    shapes: list[tuple]
    attrs: dict = field(default_factory=dict)
    torch: Callable | None = None       # (torch tensors) -> tensor
    numpy: Callable | None = None       # (arrays, out) -> None
    flops: float = 0.0                  # > 0: report GFLOP/s instead of GB/s
    kernel: Callable | None = None      # () -> structured kernel, for multi-op chains


def _cases() -> list[Case]:
    import numpy as np
    import torch
    import torch.nn.functional as F

    def bn(x, s, b, m, v):
        return F.batch_norm(x, m, v, s, b, training=False, eps=1e-5)

    return [
        Case("add_bcast", "elementwise", "graph.add", [(8, 64, 56, 56), (64, 1, 1)],
             torch=lambda x, y: x + y, numpy=lambda a, o: np.add(a[0], a[1], out=o)),
        Case("gelu", "elementwise", "graph.gelu", [(4, 1024, 1024)],
             torch=lambda x: F.gelu(x), numpy=None),
        Case("bias_gelu_chain", "broadcast chain", None, [(8, 256, 3136), (256,), (256,)],
             torch=lambda x, s, b: F.gelu(x * s[:, None] + b[:, None]), kernel=_bias_gelu_chain),
        Case("sum_last", "reduce inner", "graph.reduce_sum", [(8192, 1024)], {"axes": (1,)},
             torch=lambda x: x.sum(1), numpy=lambda a, o: np.sum(a[0], axis=1, out=o)),
        Case("sum_first", "reduce outer", "graph.reduce_sum", [(1024, 8192)], {"axes": (0,)},
             torch=lambda x: x.sum(0), numpy=lambda a, o: np.sum(a[0], axis=0, out=o)),
        Case("max_mid", "reduce middle", "graph.reduce_max", [(32, 512, 512)], {"axes": (1,)},
             torch=lambda x: x.amax(1), numpy=lambda a, o: np.max(a[0], axis=1, out=o)),
        Case("mean_hw", "reduce inner", "graph.reduce_mean", [(32, 256, 32, 32)], {"axes": (2, 3)},
             torch=lambda x: x.mean((2, 3)), numpy=lambda a, o: np.mean(a[0], axis=(2, 3), out=o)),
        Case("argmax", "arg reduce", "graph.argmax", [(4096, 1000)], {"axis": 1},
             torch=lambda x: x.argmax(1), numpy=None),
        Case("softmax", "softmax", "graph.softmax", [(8192, 1024)], {"axis": -1},
             torch=lambda x: torch.softmax(x, -1)),
        Case("softmax_axis1", "softmax", "graph.softmax", [(16, 512, 512)], {"axis": 1},
             torch=lambda x: torch.softmax(x, 1)),
        Case("log_softmax", "softmax", "graph.log_softmax", [(8192, 1024)], {"axis": -1},
             torch=lambda x: torch.log_softmax(x, -1)),
        Case("layer_norm", "layer_norm", "graph.layer_norm", [(8192, 1024), (1024,), (1024,)], {"axis": -1},
             torch=lambda x, s, b: F.layer_norm(x, (1024,), s, b)),
        Case("group_norm", "group_norm", "graph.group_norm", [(8, 256, 56, 56), (256,), (256,)],
             {"num_groups": 32}, torch=lambda x, s, b: F.group_norm(x, 32, s, b)),
        Case("instance_norm", "instance_norm", "graph.instance_norm", [(8, 256, 56, 56), (256,), (256,)],
             torch=lambda x, s, b: F.instance_norm(x, weight=s, bias=b)),
        Case("batch_norm", "batch_norm (inference)", "graph.batch_norm",
             [(8, 256, 56, 56), (256,), (256,), (256,), (256,)], torch=bn),
        Case("max_pool", "pool", "graph.max_pool", [(8, 64, 112, 112)],
             {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
             torch=lambda x: F.max_pool2d(x, 3, 2, 1)),
        Case("avg_pool", "pool", "graph.avg_pool", [(8, 128, 56, 56)],
             {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "count_include_pad": True},
             torch=lambda x: F.avg_pool2d(x, 3, 1, 1)),
        Case("global_avg_pool", "pool", "graph.global_avg_pool", [(32, 512, 14, 14)],
             torch=lambda x: F.adaptive_avg_pool2d(x, 1)),
        Case("depthwise_3x3", "depthwise conv", "graph.conv", [(8, 256, 56, 56), (256, 1, 3, 3)],
             {"groups": 256, "pads": (1, 1, 1, 1)}, torch=lambda x, w: F.conv2d(x, w, padding=1, groups=256),
             flops=2 * 8 * 256 * 56 * 56 * 9),
        Case("depthwise_3x3_s2", "depthwise conv", "graph.conv", [(8, 256, 56, 56), (256, 1, 3, 3)],
             {"groups": 256, "pads": (1, 1, 1, 1), "strides": (2, 2)},
             torch=lambda x, w: F.conv2d(x, w, stride=2, padding=1, groups=256), flops=2 * 8 * 256 * 28 * 28 * 9),
        Case("transpose_2d", "transpose", "graph.transpose", [(4096, 4096)], {"perm": (1, 0)},
             torch=lambda x: x.t().contiguous(), numpy=lambda a, o: np.copyto(o, a[0].T)),
        Case("transpose_heads", "transpose", "graph.transpose", [(16, 512, 12, 64)], {"perm": (0, 2, 1, 3)},
             torch=lambda x: x.permute(0, 2, 1, 3).contiguous(),
             numpy=lambda a, o: np.copyto(o, a[0].transpose(0, 2, 1, 3))),
        Case("nchw_to_nhwc", "transpose", "graph.transpose", [(8, 256, 56, 56)], {"perm": (0, 2, 3, 1)},
             torch=lambda x: x.permute(0, 2, 3, 1).contiguous(),
             numpy=lambda a, o: np.copyto(o, a[0].transpose(0, 2, 3, 1))),
        Case("flatten_hw", "reshape", "graph.reshape", [(8, 256, 56, 56)], {"shape": (8, 256, 3136)},
             torch=lambda x: x.reshape(8, 256, 3136).clone(), numpy=lambda a, o: np.copyto(o, a[0].reshape(o.shape))),
        Case("concat", "concat", "graph.concat", [(8, 128, 56, 56), (8, 128, 56, 56)], {"axis": 1},
             torch=lambda x, y: torch.cat([x, y], 1), numpy=lambda a, o: np.concatenate(a, 1, out=o)),
        Case("slice", "slice", "graph.slice", [(8, 256, 58, 58)],
             {"starts": (1, 1), "ends": (57, 57), "axes": (2, 3), "steps": (1, 1)},
             torch=lambda x: x[:, :, 1:57, 1:57].contiguous(),
             numpy=lambda a, o: np.copyto(o, a[0][:, :, 1:57, 1:57])),
        Case("pad", "pad", "graph.pad", [(8, 256, 56, 56)], {"pads": (0, 0, 1, 1, 0, 0, 1, 1)},
             torch=lambda x: F.pad(x, (1, 1, 1, 1))),
        Case("gather_rows", "gather", "graph.gather", [(50000, 512), "idx:8192"], {"axis": 0},
             torch=lambda x, i: x[i], numpy=lambda a, o: np.take(a[0], a[1], axis=0, out=o)),
        Case("cumsum", "cumsum", "graph.cumsum", [(4096, 512)], {"axis": 1},
             torch=lambda x: torch.cumsum(x, 1), numpy=lambda a, o: np.cumsum(a[0], axis=1, out=o)),
        Case("attention", "attention", "graph.attention", [(4, 12, 256, 64)] * 3,
             torch=lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
             flops=4 * 4 * 12 * 256 * 256 * 64),
        Case("matmul_256", "contraction hook", "graph.matmul", [(256, 256), (256, 256)],
             torch=lambda a, b: a @ b, numpy=lambda a, o: np.matmul(a[0], a[1], out=o), flops=2 * 256 ** 3),
    ]


def _bias_gelu_chain():
    """y = gelu(x * s[c] + b[c]) as three computes (two intermediates): fusion's typical output."""
    from tensorforge.dialects.structured.builder import KernelBuilder
    from tensorforge.ir.core import Block
    from tensorforge.ir.types import DType, TensorType
    f32 = DType.f32
    n, c, hw = 8, 256, 3136
    kb = KernelBuilder("bias_gelu", [TensorType((n, c, hw), f32), TensorType((c,), f32), TensorType((c,), f32)])
    x, s, b = kb.inputs
    t0 = kb.compute((n, c, hw), "ppp", f32, lambda i, j, k: x[i, j, k] * s[j])
    t1 = kb.compute((n, c, hw), "ppp", f32, lambda i, j, k: t0[i, j, k] + b[j])
    y = kb.compute((n, c, hw), "ppp", f32, lambda i, j, k: t1[i, j, k].apply("gelu"))
    return kb.ret([y], Block([a.type for a in kb.block.args]).args)


# ---- the schedule this replaced (commit f00eaec), kept here as the baseline ---------------------
def previous_default(fn, threads: int = 2) -> None:
    """Outermost parallel loop with >= threads iterations parallel, innermost loops vectorized."""
    from tensorforge.schedule.analysis import body, extent

    def chain_of(loop):
        out = [loop]
        while True:
            ops = body(out[-1]).ops
            if len(ops) == 1 and ops[0].name == "loop.for":
                out.append(ops[0])
            else:
                return out

    def innermost(loop):
        inner = [op for op in body(loop) if op.name == "loop.for"]
        if not inner:
            yield loop
        for child in inner:
            yield from innermost(child)

    for nest in [op for op in body(fn) if op.name == "loop.for"]:
        chain = [l for l in chain_of(nest) if not l.attributes.get("reduction")]
        pick = next((l for l in chain if extent(l) >= threads), None)
        if pick is not None and extent(pick) >= 2:
            pick.attributes["kind"] = "parallel"
        for inner in innermost(nest):
            if inner.attributes.get("reduction") or inner.attributes["kind"] == "parallel":
                continue
            if not any(op.name == "loop.alloc" for op in body(inner)) and extent(inner) >= 4:
                inner.attributes["kind"] = "vectorize"


# ---- measurement (inside the per-thread-count subprocess) ---------------------------------------
def placed(shape, dtype, offset: int):
    """An empty array whose data starts ``offset`` bytes past a page boundary.

    Big arrays otherwise all start at the same offset in their pages, so an input and an output
    read and written at the same index alias in the store buffer (same low 12 address bits) and
    timings change by tens of percent with where the allocator put them; the benchmark puts inputs
    at 256-byte steps from offset 0 and outputs half a page away."""
    import numpy as np
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + 2 * 4096, np.uint8)
    start = (-raw.ctypes.data) % 4096 + offset % 4096
    return raw[start:start + n].view(dtype).reshape(shape)


def _inputs(case: Case, rng):
    import numpy as np
    xs = []
    for k, s in enumerate(case.shapes):
        if isinstance(s, str):                       # "idx:N": N row indices into the first input
            n = int(s.split(":")[1])
            x = rng.integers(0, case.shapes[0][0], n).astype(np.int64)
        else:
            x = rng.standard_normal(s).astype(np.float32)
        xs.append(placed(x.shape, x.dtype, 256 * k))
        xs[-1][...] = x
    if case.name in ("group_norm", "instance_norm", "batch_norm"):
        for x in xs[1:]:
            x[...] = np.abs(x) + 0.5
    return xs


def _structured(case: Case, xs):
    if case.kernel is not None:
        return case.kernel()
    from tensorforge.ir import Module, tensor, verify
    from tensorforge.ir.types import DType
    from tensorforge.passes.lower.to_structured import lower_op_to_kernel
    m = Module()
    f = m.add_function("main", [tensor(x.shape, DType.from_np(x.dtype)) for x in xs])
    op = f.builder().create(case.op, list(f.args), case.attrs)
    f.set_return(list(op.results))
    verify(m)
    return lower_op_to_kernel(op)


def _native(kernel, schedule, name: str, offset: int = 2048):
    """(callable running the kernel on fixed buffers, output arrays, C source) for one schedule."""
    import numpy as np
    from tensorforge.codegen.c.emit_loop import PRELUDE, emit_function
    from tensorforge.codegen.c.toolchain import compile_c
    from tensorforge.passes.lower.structured_to_loop import lower_kernel
    fn = lower_kernel(kernel)
    schedule(fn)
    src = PRELUDE + emit_function(fn, "tf_kernel", static=False)
    cfn = compile_c(src, name=name).function("tf_kernel")
    args = fn.regions[0].blocks[0].args
    n_in = fn.attributes["num_inputs"]
    outs = [placed(a.type.shape, a.type.dtype.np, offset + 256 * j) for j, a in enumerate(args[n_in:])]

    def bind(xs):
        ptrs = [ctypes.c_void_p(a.ctypes.data) for a in list(xs) + outs]
        return lambda: cfn(*ptrs)

    return bind, outs, src


def _time(fn, clock, threads: int, budget: float = 0.02) -> tuple[float, float]:
    """(fastest wall time, median CPU time / threads) per call over calls filling about ``budget`` s.

    Other tenants preempt our threads at random; the fastest call of a round is the one they left
    alone (with two threads, a preempted thread holds its partner at the barrier for a whole
    scheduler tick, which a median would report as the kernel's speed)."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    reps = max(3, min(50, int(budget / once)))
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), clock()
        fn()
        cpu.append((clock() - c) / threads)
        wall.append(time.perf_counter() - w)
    return min(wall), statistics.median(cpu)


def _runnable() -> int:
    """Runnable tasks on the machine now (the 4th field of /proc/loadavg, ours included)."""
    try:
        with open("/proc/loadavg") as f:
            return int(f.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return 0


def _wait_for_quiet(threads: int, patience: float = 1.0) -> None:
    """Waits (at most ``patience`` s) until no more tasks are runnable than we would use ourselves."""
    end = time.perf_counter() + patience
    while _runnable() > threads + 1 and time.perf_counter() < end:
        time.sleep(0.01)


def measure(threads: int, only: list[str], rounds: int) -> dict:
    import numpy as np
    import torch
    from tensorforge.codegen.target import Target
    from tensorforge.schedule import default_schedule
    torch.set_num_threads(threads)
    cores = Target.host().cores
    clock = time.thread_time if threads == 1 else time.process_time
    rng = np.random.default_rng(0)
    rows = []
    load0 = os.getloadavg()[0]
    big = placed((16 << 20,), np.float32, 0)
    big[...] = 1.0
    dst = placed(big.shape, np.float32, 2048)
    tb, tdst = torch.from_numpy(big), torch.from_numpy(dst)
    ceiling = {"numpy": lambda: np.copyto(dst, big), "torch": lambda: tdst.copy_(tb)}
    samples = {k: [] for k in ceiling}
    for _ in range(rounds):
        for k, f in ceiling.items():
            samples[k].append(_time(f, clock, threads)[0])
    copy = {k: 2 * big.nbytes / statistics.median(v) / 1e9 for k, v in samples.items()}
    for case in _cases():
        if only and case.name not in only:
            continue
        xs = _inputs(case, rng)
        kernel = _structured(case, xs)
        t_compile = time.perf_counter()
        bind_new, outs_new, src = _native(kernel, lambda fn: default_schedule(fn, cores), f"bench_{case.name}")
        t_compile = time.perf_counter() - t_compile
        bind_old, _, _ = _native(kernel, lambda fn: previous_default(fn, cores), f"bench_old_{case.name}")
        txs = [torch.from_numpy(x) for x in xs]
        variants = {"new": bind_new(xs), "old": bind_old(xs)}
        err = None
        if case.torch is not None:
            variants["torch"] = lambda: case.torch(*txs)
            want = case.torch(*txs).numpy()
            got = outs_new[0]
            variants["new"]()
            err = float(np.abs(got.reshape(want.shape).astype(np.float64) - want).max()
                        / max(1.0, float(np.abs(want).max())))
        if case.numpy is not None:
            out = placed(outs_new[0].shape, outs_new[0].dtype, 2048)
            variants["numpy"] = lambda: case.numpy(xs, out)
        per: dict[str, list] = {k: [] for k in variants}
        names = list(variants)
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:     # a different order every round
                _wait_for_quiet(threads)
                per[k].append(_time(variants[k], clock, threads))
        nbytes = sum(x.nbytes for x in xs) + sum(o.nbytes for o in outs_new)
        work = case.flops or nbytes
        res = {}
        for k, ts in per.items():
            wall = statistics.median(t[0] for t in ts)
            cpu = statistics.median(t[1] for t in ts)
            res[k] = {"wall": work / wall / 1e9, "cpu": work / cpu / 1e9, "ms": wall * 1e3}
        new_walls = sorted(t[0] for t in per["new"])
        q = statistics.quantiles(new_walls, n=4) if len(new_walls) >= 2 else [new_walls[0]] * 3
        rows.append({"name": case.name, "kind": case.kind, "unit": "GFLOP/s" if case.flops else "GB/s",
                     "res": res, "noise": (q[2] - q[0]) / q[1], "err": err, "compile_s": t_compile})
    return {"threads": threads, "copy": copy, "rows": rows, "load": [load0, os.getloadavg()[0]]}


def run_subprocess(threads: int, only: list[str], rounds: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    return run_child(__file__, {"threads": threads, "only": only, "rounds": rounds}, env, f"{threads} thread(s)")


def report(run: dict) -> None:
    c = run["copy"]
    print(f"\n== {run['threads']} thread(s); copy ceiling: numpy {c['numpy']:.1f} GB/s (1 thread), "
          f"torch copy_ {c['torch']:.1f} GB/s; load average {run['load'][0]:.1f} at start, {run['load'][1]:.1f} at end")
    head = f"{'kernel':17s} {'kind':22s} {'unit':7s} {'new':>6s} {'old':>6s} {'torch':>6s} {'numpy':>6s} " \
           f"{'new/old':>7s} {'new/torch':>9s} {'cpu':>5s} {'new ms':>7s} {'noise':>6s} {'err':>7s}"
    print(head)
    for r in run["rows"]:
        res = r["res"]

        def col(k):
            return f"{res[k]['wall']:6.1f}" if k in res else f"{'-':>6s}"

        ratio_old = res["new"]["wall"] / res["old"]["wall"]
        ratio_t = f"{res['new']['wall'] / res['torch']['wall']:9.2f}" if "torch" in res else f"{'-':>9s}"
        ratio_c = f"{res['new']['cpu'] / res['torch']['cpu']:5.2f}" if "torch" in res else f"{'-':>5s}"
        err = f"{r['err']:7.0e}" if r["err"] is not None else f"{'-':>7s}"
        print(f"{r['name']:17s} {r['kind']:22s} {r['unit']:7s} {col('new')} {col('old')} {col('torch')} "
              f"{col('numpy')} {ratio_old:7.2f} {ratio_t} {ratio_c} {res['new']['ms']:7.2f} {r['noise']:6.0%} {err}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="", help="comma-separated kernel names")
    ap.add_argument("--json", help="also write the raw results here")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(measure(spec["threads"], spec["only"], spec["rounds"])))
        return
    only = [s for s in args.only.split(",") if s]
    print(f"median over {args.rounds} rounds of the fastest call per round (wall clock); cpu = new/torch on CPU "
          f"time; noise = IQR/median of 'new' over rounds; err = max |new - torch| / max(1, max |torch|)")
    runs = []
    for t in args.threads:
        runs.append(run_subprocess(t, only, args.rounds))
        report(runs[-1])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
