"""``tensorforge bench`` itself: compile a model, check it, set up the peers, time them all.

``bench_models`` returns plain data (the JSON the command writes); ``report`` turns it into the
table and the chart.  Every contender runs on the same NumPy inputs (as tensors for torch) and
the same weights, on ``threads`` threads, timed interleaved after warm-up
(``time_interleaved``); ratios are tensorforge's speedup over each peer, peer median / ours.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..commands.loading import LoadedModel, load_model
from ..progress import Progress
from .peers import PEERS, Contender, PeerUnavailable, make_peer
from .roofline import Roofline, load_average
from .stats import max_rel_err_all, quartile_spread, ratio_stats
from .timing import time_interleaved
from .work import graph_bytes, graph_flops


@dataclass
class BenchConfig:
    threads: int
    repeats: int = 10
    warmup: int = 2
    budget_s: float | None = 120.0      # per model, for the timed rounds
    peers: Sequence[str] = PEERS
    tol: float = 1e-4                   # max relative error against the reference
    progress: bool = True
    batch: int | None = None
    shapes: Mapping[str, int] = field(default_factory=dict)
    seed: int = 0                       # of generated inputs (.onnx and .tfm models)
    db: Any = "auto"                    # tuning database, as in tensorforge.compile
    fast_math: bool = False             # as in tensorforge.compile
    # Each contender's turn: a pause, one untimed call, then ``block`` timed calls, so that the
    # previous contender's spinning thread pool is asleep (see time_interleaved).
    block: int = 3
    pause_s: float = 0.2


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def apply_threads(threads: int) -> None:
    """Sets torch's intra-op threads (tensorforge and onnxruntime take theirs per model)."""
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(threads)


def bench_models(specs: Sequence[str], cfg: BenchConfig, roofline: Roofline | None) -> dict:
    """Benchmarks every MODEL in ``specs``; the result is what ``bench --json`` writes."""
    apply_threads(cfg.threads)
    info = run_info(cfg)
    models = [bench_model(load_model(s, cfg.batch, cfg.shapes, cfg.seed, cfg.threads), cfg, roofline)
              for s in specs]
    info["load_after"] = load_average()
    return {"info": info, "roofline": asdict(roofline) if roofline else None, "models": models}


def run_info(cfg: BenchConfig) -> dict:
    import tensorforge
    from .roofline import host_key
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpu": host_key()["cpu"],
            "cores": default_threads(), "machine": platform.machine(), "threads": cfg.threads,
            "repeats": cfg.repeats, "warmup": cfg.warmup, "block": cfg.block, "pause_s": cfg.pause_s,
            "tolerance": cfg.tol, "load_before": load_average(),
            "tuning_db": None if cfg.db is None else str(cfg.db), "fast_math": cfg.fast_math,
            "tensorforge": tensorforge.__version__, "numpy": np.__version__}
    for pkg in ("torch", "onnxruntime"):
        try:
            info[pkg] = __import__(pkg).__version__
        except ImportError:
            info[pkg] = None
    return info


def bench_model(lm: LoadedModel, cfg: BenchConfig, roofline: Roofline | None) -> dict:
    """Compile, check, set up peers and time one loaded model; a dict row of the JSON."""
    import tensorforge

    peers = [p for p in cfg.peers if p != "tensorforge"]
    total = 2 + len(peers) + cfg.warmup + cfg.repeats
    row: dict = {"model": lm.name, "kind": lm.kind,
                 "inputs": [[list(a.shape), str(a.dtype)] for a in lm.inputs]}
    with Progress(f"bench {lm.name}", total=total, enabled=cfg.progress) as bar:
        bar.set_note("compiling with tensorforge")
        t0 = time.perf_counter()
        if lm.kind == "tfm":
            cm = lm.compile(threads=cfg.threads)
            flops = nbytes = None
        else:
            graph = lm.import_module()
            flops, nbytes = graph_flops(graph), graph_bytes(graph)
            cm = tensorforge.compile(graph, threads=cfg.threads, db=cfg.db, fast_math=cfg.fast_math)
        compile_s = time.perf_counter() - t0
        tf = Contender("tensorforge", lambda: cm.run(*lm.inputs), cm.run(*lm.inputs), compile_s)
        bar.advance(note="checking outputs")
        row.update(_work(flops, nbytes, roofline, cfg.threads))
        refs = lm.reference(lm.inputs) if lm.reference else None
        row["check"] = _check(tf.outputs, refs, lm, cfg.tol)
        bar.advance()
        contenders, skipped = [tf], []
        for key in peers:
            bar.set_note(f"setting up {key}")
            try:
                contenders.append(make_peer(key, lm, cfg.threads))
            except PeerUnavailable as e:
                skipped.append({"peer": key, "reason": str(e)})
            bar.advance()
        bar.set_note("timing " + ", ".join(c.key for c in contenders))
        timings = time_interleaved({c.key: c.run for c in contenders}, repeats=cfg.repeats,
                                   warmup=cfg.warmup, budget_s=cfg.budget_s, on_round=bar.advance,
                                   block=cfg.block, pause_s=cfg.pause_s)
        bar.set_note("done")
    row["contenders"] = [_contender_row(c, timings, refs, row, cfg.block) for c in contenders]
    row["skipped"] = skipped
    return row


def _work(flops: float | None, nbytes: int | None, roofline: Roofline | None, threads: int) -> dict:
    out = {"gflop": None if flops is None else flops / 1e9, "mbytes": None if nbytes is None else nbytes / 1e6,
           "intensity": None, "memory_bound": None}
    if flops is not None and nbytes:
        out["intensity"] = flops / nbytes
        if roofline is not None:
            out["memory_bound"] = out["intensity"] < roofline.balance(threads)
    if roofline is not None:
        out["peak_gflops"] = roofline.peak_gflops(threads)
        out["bandwidth_gbs"] = roofline.copy_gbs
    return out


def _check(outs: list, refs: list | None, lm: LoadedModel, tol: float) -> dict:
    if refs is None:
        note = ("a .tfm file has no reference model; bench its zoo name or .onnx file to check outputs"
                if lm.kind == "tfm" else lm.reference_note or "no reference")
        return {"reference": None, "max_rel_err": None, "ok": True, "tol": tol, "note": note}
    err = max_rel_err_all(outs, refs)
    return {"reference": lm.reference_name, "max_rel_err": err, "ok": bool(err <= tol), "tol": tol}


def _contender_row(c: Contender, timings: dict, refs: list | None, model: dict, block: int) -> dict:
    t = timings[c.key]
    tf = timings["tensorforge"]
    median_s = t.median_ms / 1e3
    r = {"key": c.key, "name": c.label, "median_ms": t.median_ms, "min_ms": t.min_ms,
         "rounds": len(t.samples) // block, "samples": len(t.samples), "noise": quartile_spread(t.samples), "setup_s": c.setup_s,
         "max_rel_err": None if refs is None else max_rel_err_all(c.outputs, refs)}
    if c.key != "tensorforge":
        r["tf_speedup"] = t.median_ms / tf.median_ms
        r["tf_speedup_rounds"], r["tf_speedup_noise"] = ratio_stats(t.samples, tf.samples)
    if model["gflop"] is not None:
        r["gflops"] = model["gflop"] / median_s
        r["gbs"] = model["mbytes"] / 1e3 / median_s
        if model.get("peak_gflops"):
            r["pct_peak"] = 100 * r["gflops"] / model["peak_gflops"]
            r["pct_bandwidth"] = 100 * r["gbs"] / model["bandwidth_gbs"]
    return r
