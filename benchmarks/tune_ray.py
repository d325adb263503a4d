"""Tuning on a local Ray cluster of 2 worker nodes against tuning locally, on this machine.

    python benchmarks/tune_ray.py [--model bert_tiny] [--trials 96] [--builds 16]

1. **Same budget, same result.** The model is tuned twice with the same trial budget into two fresh
   databases: locally (``tensorforge.tune``) and on ``local:2`` (``tune(..., cluster=...)``: builds
   as Ray tasks, measurements on the two worker nodes).  Each database is compiled into the model
   and the two compiled models (and the untuned one) are timed in alternating blocks; the tuned
   latencies should agree within the noise (the untuned model timed twice shows what that is).
2. **Build throughput.** ``--builds`` distinct candidates of the model's largest GEMM task are built
   as Ray build tasks pinned to one worker node, then other ones spread over both: builds per second
   with 1 and 2 build workers (distinct configs each time, so gcc's cache never answers).
3. **Measurements never overlap on a node**, from the start/end times each measuring actor
   recorded for every batch of the cluster tune (and how many windows overlap *across* the two
   nodes, which share this machine's cores: the check is not vacuous).

Every node of the cluster runs on this machine, so the two worker nodes share its cores with each
other (and with whatever else runs here): the cluster cannot be faster than the machine.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def time_models(models: dict, inputs, blocks: int = 15, calls: int = 20) -> dict[str, float]:
    """Median per-call seconds of each compiled model, timed in alternating blocks."""
    times: dict[str, list[float]] = {k: [] for k in models}
    for cm in models.values():
        cm(*inputs)
    for b in range(blocks):
        order = list(models) if b % 2 == 0 else list(models)[::-1]
        for k in order:
            t0 = time.perf_counter()
            for _ in range(calls):
                models[k](*inputs)
            times[k].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in times.items()}


def build_throughput(session, task, configs: list[dict], nodes: list[str]) -> float:
    """Builds per second of ``configs`` as Ray build tasks spread over ``nodes``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    pool = session.pool
    wire, target = pool.wire(task), pool.target_ref()
    ray = session.ray
    t0 = time.perf_counter()
    refs = [pool.build_task(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False))
            .remote(wire, c, target) for i, c in enumerate(configs)]
    outs = ray.get(refs)
    wall = time.perf_counter() - t0
    failed = sum(1 for o in outs if o.get("error"))
    if failed:
        print(f"  ({failed} of {len(outs)} builds failed: {next(o['error'] for o in outs if o.get('error'))})")
    return len(configs) / wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert_tiny", help="zoo model (default bert_tiny; bert_base takes hours here)")
    ap.add_argument("--trials", type=int, default=96)
    ap.add_argument("--builds", type=int, default=16, help="candidates per build-throughput round")
    ap.add_argument("--time-budget", type=float, default=None)
    args = ap.parse_args()

    import tensorforge
    from tensorforge.commands.loading import load_model
    from tensorforge.tune.distributed.driver import overlaps
    from tensorforge.tune.distributed.local import LocalCluster
    from tensorforge.tune.distributed.session import Cluster
    from tensorforge.tune.space import canonical, space_for
    from tensorforge.tune.tasks import extract_tasks

    lm = load_model(args.model, None, {})
    graph = lm.import_module()
    inputs = lm.example_inputs() if hasattr(lm, "example_inputs") else lm.inputs
    work = tempfile.mkdtemp(prefix="tf-ray-bench-")
    local_db, ray_db = os.path.join(work, "local.sqlite"), os.path.join(work, "ray.sqlite")

    t0 = time.perf_counter()
    local = tensorforge.tune(graph, trials=args.trials, db=local_db, progress=False, timeout_s=args.time_budget)
    print(f"local tune: {local.trials} trials in {time.perf_counter() - t0:.0f} s; "
          f"kernels default {local.model_estimate('default_s') * 1e3:.3f} ms, "
          f"tuned {local.model_estimate('applied_s') * 1e3:.3f} ms", flush=True)

    cluster = LocalCluster(2)
    try:
        t0 = time.perf_counter()
        cluster.start()
        session = Cluster.open(cluster.address)
        print(f"local:2 cluster up in {time.perf_counter() - t0:.0f} s", flush=True)
        t0 = time.perf_counter()
        remote = tensorforge.tune(graph, trials=args.trials, db=ray_db, progress=False, cluster=session.borrowed(),
                                  timeout_s=args.time_budget)
        print(f"ray tune:   {remote.trials} trials in {time.perf_counter() - t0:.0f} s; "
              f"kernels default {remote.model_estimate('default_s') * 1e3:.3f} ms, "
              f"tuned {remote.model_estimate('applied_s') * 1e3:.3f} ms; {remote.cluster}", flush=True)

        # Build throughput: 1 worker node, then 2, distinct configs each round.
        from tensorforge.codegen.target import Target
        target = Target.host()
        task = max((t for t in extract_tasks(graph) if t.kind == "gemm"), key=lambda t: t.flops)
        space = space_for(task, target)
        rng, seen, configs = random.Random(1), set(), []
        while len(configs) < 2 * args.builds:
            c = space.sample(rng)
            if canonical(c) not in seen:
                seen.add(canonical(c))
                configs.append(c)
        session.measurer(target)
        workers = [n["NodeID"] for n in session.nodes() if n.get("Resources", {}).get("CPU", 0) >= 1]
        one = build_throughput(session, task, configs[:args.builds], workers[:1])
        two = build_throughput(session, task, configs[args.builds:], workers[:2])
        print(f"build throughput ({task.name}, {args.builds} builds each): 1 worker {one:.2f} builds/s, "
              f"2 workers {two:.2f} builds/s ({two / one:.2f}x)", flush=True)
        session.pool.close()
    finally:
        import ray
        if ray.is_initialized():
            ray.shutdown()
        cluster.close()

    ms = remote.measurements
    by_node: dict[str, list[dict]] = {}
    for m in ms:
        by_node.setdefault(m["node"], []).append(m)
    cross = sum(1 for a in ms for b in ms if a["node"] < b["node"] and a["start"] < b["end"] and b["start"] < a["end"])
    print(f"measurements: {len(ms)} batches on {len(by_node)} nodes "
          f"({', '.join(f'{n[:8]}: {len(v)}' for n, v in by_node.items())}); overlapping on one node: "
          f"{len(overlaps(ms))}; overlapping across the two nodes: {cross}")
    for n, v in by_node.items():
        v = sorted(v, key=lambda m: m["start"])
        gaps = [b["start"] - a["end"] for a, b in zip(v, v[1:])]
        if gaps:
            print(f"  node {n[:8]}: smallest gap between consecutive measurements {min(gaps) * 1e3:.1f} ms")

    t0 = time.perf_counter()
    models = {"untuned": tensorforge.compile(graph, db=None), "untuned again": tensorforge.compile(graph, db=None),
              "local-tuned": tensorforge.compile(graph, db=local_db), "ray-tuned": tensorforge.compile(graph, db=ray_db)}
    lat = time_models(models, inputs)
    print(f"compiled and timed in {time.perf_counter() - t0:.0f} s (median per call, alternating blocks):")
    for k, v in lat.items():
        print(f"  {k:14s} {v * 1e3:8.3f} ms")
    print(f"  ray-tuned / local-tuned = {lat['ray-tuned'] / lat['local-tuned']:.3f}; "
          f"untuned again / untuned = {lat['untuned again'] / lat['untuned']:.3f} (the noise)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
