"""Each kernel of a zoo model against onnxruntime's nodes, timed inside the model, in one process.

    .venv/bin/python benchmarks/layer_gaps.py resnet50                 # 2 threads, 12 rounds
    .venv/bin/python benchmarks/layer_gaps.py mobilenet_v2 --threads 1 --rounds 20
    .venv/bin/python benchmarks/layer_gaps.py efficientnet_b0 --batch 8
    .venv/bin/python benchmarks/layer_gaps.py resnet50_int8.onnx       # a QDQ file: int8 against int8

Whole-model ratios say how far behind a model is, not where.  Per-layer benchmarks time a layer on
its own, where its input stays hot in cache and nothing runs before it, and profiles taken in
separate processes differ by 30-40% on this shared machine depending on the minute.  This script
builds the model with kernel timers (the build ``tensorforge explain`` profiles) and an
onnxruntime session with profiling on, then alternates them in one process: rounds of [pause,
12 runs], the kernel times of the last 6 runs of each round (the first calls after a pause are
slower for every contender).  It prints the wall times, then our kernels in program order (name,
ms per run, how it was scheduled) and onnxruntime's nodes in execution order (op, ms per run,
output shape), convolutions in both lists in the same order for the CNNs of the zoo.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import tempfile
import time


def build_profiled(lm, threads: int):
    """Our model with kernel timers, compiled as ``tensorforge.compile`` would (default pipeline,
    fusion and tuning database): the build ``tensorforge explain`` profiles."""
    import dataclasses

    from tensorforge.codegen.target import Target
    from tensorforge.passes.lower.graph_to_kernels import default_fusion
    from tensorforge.passes.pipeline import default_pipeline
    from tensorforge.report.collect import build_profiled as profiled_build

    target = dataclasses.replace(Target.host(), cores=threads)
    module = lm.import_module()
    default_pipeline(target).run(module)
    return profiled_build(module, target, lm.name, default_fusion())[2]


def ort_session(lm, threads: int, profile_dir: str):
    import onnxruntime as ort

    from tensorforge.benchmark.peers import _feeds, _onnx_bytes

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.enable_profiling = True
    opts.log_severity_level = 3          # no warnings about unused initializers of quantized files
    opts.profile_file_prefix = os.path.join(profile_dir, "ort")
    session = ort.InferenceSession(_onnx_bytes(lm), opts, providers=["CPUExecutionProvider"])
    feeds = _feeds(lm, lm.inputs, {i.name for i in session.get_inputs()})
    return session, feeds


def ort_nodes(profile_path: str) -> list[tuple[str, str, float, object]]:
    """(node, op, mean seconds per call, output shape) in first-execution order."""
    with open(profile_path) as f:
        events = json.load(f)
    total, calls, info, order = collections.defaultdict(float), collections.Counter(), {}, []
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        node = e["name"][:-len("_kernel_time")]
        if node not in info:
            order.append(node)
            info[node] = (e["args"].get("op_name", "?"), e["args"].get("output_type_shape"))
        total[node] += e["dur"] * 1e-6
        calls[node] += 1
    return [(n, info[n][0], total[n] / calls[n], info[n][1]) for n in order]


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    from tensorforge.commands.loading import load_model
    from tensorforge.report.collect import example_inputs

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a zoo name or an .onnx file (a quantized one compares int8 with int8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=None, help="the zoo model's batch size (default: its own)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--pause-s", type=float, default=0.05)
    args = ap.parse_args(argv)

    lm = load_model(args.model, args.batch, {})
    model = build_profiled(lm, args.threads)
    xs = example_inputs(model)
    with tempfile.TemporaryDirectory() as tmp:
        session, feeds = ort_session(lm, args.threads, tmp)
        ours, wall = 0.0, {"tensorforge": [], "onnxruntime": []}
        for _ in range(args.rounds):
            time.sleep(args.pause_s)
            for i in range(12):
                if i == 6:
                    before, t0 = model.kernel_times().copy(), time.perf_counter()
                model.run(xs)
            wall["tensorforge"].append((time.perf_counter() - t0) / 6)
            ours = ours + (model.kernel_times() - before)
            time.sleep(args.pause_s)
            for i in range(12):
                if i == 6:
                    t0 = time.perf_counter()
                session.run(None, feeds)
            wall["onnxruntime"].append((time.perf_counter() - t0) / 6)
        nodes = ort_nodes(session.end_profiling())
    per_run = ours / (6 * args.rounds)
    names = model.layout.kernel_names
    print(f"{args.model}, {args.threads} threads, {args.rounds} rounds: wall (median) "
          + ", ".join(f"{k} {np.median(v) * 1e3:.2f} ms" for k, v in wall.items())
          + f"; kernel sums tensorforge {per_run.sum() * 1e3:.2f} ms, "
          f"onnxruntime {sum(n[2] for n in nodes) * 1e3:.2f} ms")
    print("\ntensorforge kernels, program order (ms per run)")
    for i, seconds in enumerate(per_run):
        print(f"{i:4d} {seconds * 1e3:8.3f}  {names[i] if i < len(names) else '?'}")
    print("\nonnxruntime nodes, execution order (ms per run)")
    for node, op, seconds, shape in nodes:
        print(f"{seconds * 1e3:8.3f}  {op:<18} {node[-48:]:<48} {shape}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
