"""``tensorforge bench`` itself: compile a model, check it, set up the peers, time them all.

``bench_models`` returns plain data (the JSON the command writes); ``report`` turns it into the
table and the chart.  Every contender runs on the same NumPy inputs (as tensors for torch) and
the same weights, on ``threads`` threads, timed interleaved after warm-up
(``time_interleaved``); ratios are tensorforge's speedup over each peer, peer median / ours.

``precision`` "int8" or "bf16" compiles tensorforge at that precision (int8: calibrated on the
same samples onnxruntime's ``quantize_static`` gets, see ``peers``); every contender's outputs are
then compared with the float32 reference (max |diff|, top-1 agreement for classifiers), which
is reported rather than checked unless a tolerance is given.
"""
from __future__ import annotations

import os
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..commands.loading import LoadedModel, load_model
from ..errors import TensorforgeError
from ..progress import Progress
from .peers import PEERS, Contender, PeerUnavailable, make_peer
from .roofline import Roofline, load_average
from .stats import max_abs_diff_all, max_rel_err_all, quartile_spread, ratio_stats, top1_agreement
from .timing import time_interleaved
from .work import graph_bytes, graph_flops


@dataclass
class BenchConfig:
    threads: int
    repeats: int = 10
    warmup: int = 2
    budget_s: float | None = 120.0      # per model, for the timed rounds
    peers: Sequence[str] = PEERS
    tol: float | None = 1e-4            # max relative error against the reference (None: report only)
    progress: bool = True
    batch: int | None = None
    shapes: Mapping[str, int] = field(default_factory=dict)
    seed: int = 0                       # of generated inputs (.onnx and .tfm models)
    db: Any = "auto"                    # tuning database, as in tensorforge.compile
    fast_math: bool = False             # as in tensorforge.compile
    precision: str = "f32"              # tensorforge's: f32, int8 or bf16 (as in tensorforge.compile)
    calibration: str | None = None      # int8: an .npz of samples (commands.quantize.read_calibration)
    calibration_samples: int = 8        # int8 without ``calibration``: samples drawn from the input generator
    tuned_db: str | None = None         # also time tensorforge compiled with this database's records
    tune_budget_s: float | None = None  # tune each model into ``tuned_db`` for this long first
    tune_trials: int = 100_000          # the tuning's trial cap (the budget is meant to end it)
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
            "precision": cfg.precision,
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
    total = 2 + len(peers) + cfg.warmup + cfg.repeats + (cfg.tuned_db is not None)
    reduced = cfg.precision != "f32"
    if reduced and lm.kind == "tfm":
        raise TensorforgeError(f"--precision {cfg.precision}: '{lm.name}' is already compiled; bench the zoo model "
                               f"or .onnx file it came from")
    if cfg.tuned_db is not None and lm.kind == "tfm":
        raise TensorforgeError(f"--tuned: '{lm.name}' is already compiled; bench the zoo model or .onnx file it "
                               f"came from")
    row: dict = {"model": lm.name, "kind": lm.kind, "precision": cfg.precision,
                 "inputs": [[list(a.shape), str(a.dtype)] for a in lm.inputs]}
    samples = None
    with Progress(f"bench {lm.name}", total=total, enabled=cfg.progress) as bar:
        bar.set_note("compiling with tensorforge")
        t0 = time.perf_counter()
        if lm.kind == "tfm":
            cm = lm.compile(threads=cfg.threads)
            flops = nbytes = None
        else:
            graph = lm.import_module()
            flops, nbytes = graph_flops(graph), graph_bytes(graph)
            if cfg.precision == "int8":
                samples, row["calibration"] = _calibration(lm, graph, cfg)
                bar.set_note(f"calibrating on {len(samples)} sample(s) and compiling with tensorforge")
            cm = tensorforge.compile(graph, threads=cfg.threads, db=cfg.db, fast_math=cfg.fast_math,
                                     precision=cfg.precision, calibration=samples)
        compile_s = time.perf_counter() - t0
        tf = Contender("tensorforge", _user_call(cm, lm), cm.run(*lm.inputs), compile_s,
                       cfg.precision if reduced else None, _precision_note(cm, cfg.precision))
        bar.advance(note="checking outputs")
        row.update(_work(flops, nbytes, roofline, cfg.threads))
        refs = lm.reference(lm.inputs) if lm.reference else None
        row["check"] = _check(tf.outputs, refs, lm, cfg.tol, cfg.precision)
        bar.advance()
        contenders, skipped = [tf], []
        if cfg.tuned_db is not None:
            bar.set_note(f"tuning for {cfg.tune_budget_s:g} s" if cfg.tune_budget_s else "compiling the tuned build")
            contenders.append(_tuned_contender(lm, cfg, samples, row))
            bar.advance()
        for key in peers:
            bar.set_note(f"setting up {key}")
            try:
                contenders.append(make_peer(key, lm, cfg.threads, cfg.precision, samples))
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


def _user_call(cm: Any, lm: LoadedModel) -> Callable[[], Any]:
    """What the bench times for a tensorforge build: the call a user makes, ``cm(x)``, with the
    inputs a user of that model holds (torch tensors for a zoo model, arrays otherwise), so that
    the table includes the call path (argument checks, output allocation, conversions back to
    torch) and not only the kernels that ``cm.run`` reaches."""
    inputs = lm.torch_inputs if lm.torch_inputs is not None else lm.inputs
    return lambda: cm(*inputs)


def _tuned_contender(lm: LoadedModel, cfg: BenchConfig, samples: list | None, row: dict) -> Contender:
    """tensorforge compiled again with the records of ``cfg.tuned_db``: the tuned column, timed in
    the same interleaved rounds as the untuned build and the peers.

    With ``cfg.tune_budget_s`` the model is tuned into that database first (``tensorforge.tune``
    on all cores, every task kind), so that one command gives a tuned build of a stated budget;
    the row's ``tuning`` says how long it took.  Each step imports the model afresh: neither may
    see a graph the other has rewritten."""
    import tensorforge
    if cfg.tune_budget_s:
        if cfg.precision != "f32":
            raise TensorforgeError(f"--tune-budget tunes float32 models; for --precision {cfg.precision} tune "
                                   f"the model with `tensorforge tune` first and pass its database to --tuned")
        from ..tune.api import tune
        report = tune(lm.import_module(), trials=cfg.tune_trials, db=cfg.tuned_db, timeout_s=cfg.tune_budget_s,
                      progress=False)
        row["tuning"] = {"db": str(cfg.tuned_db), "budget_s": cfg.tune_budget_s, "seconds": report.seconds,
                         "trials": report.trials, "tasks": len(report.tasks), "stopped": report.stopped,
                         "phases": dict(report.phases)}
    t0 = time.perf_counter()
    cm = tensorforge.compile(lm.import_module(), threads=cfg.threads, db=cfg.tuned_db, fast_math=cfg.fast_math,
                             precision=cfg.precision, calibration=samples)
    setup_s = time.perf_counter() - t0
    return Contender("tensorforge-tuned", _user_call(cm, lm), cm.run(*lm.inputs), setup_s,
                     cfg.precision if cfg.precision != "f32" else None,
                     f"compiled with the records of {cfg.tuned_db}")


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


def _calibration(lm: LoadedModel, graph, cfg: BenchConfig) -> tuple[list[tuple], dict]:
    """The int8 calibration samples (from ``cfg.calibration``, else drawn) and where they came from."""
    from ..commands.quantize import draw_samples, read_calibration
    if cfg.calibration:
        samples = read_calibration(cfg.calibration, lm, graph)
        return samples, {"source": cfg.calibration, "samples": len(samples)}
    samples = draw_samples(lm, cfg.calibration_samples, cfg.batch)
    source = "the zoo's input generator" if lm.kind == "zoo" else "random inputs of the declared types"
    return samples, {"source": source, "samples": len(samples)}


def _precision_note(cm, precision: str) -> str:
    """What tensorforge ran in int8, for a fair reading of the comparison with a peer that may
    have quantized more (onnxruntime's quantize_static takes every op it supports)."""
    if precision != "int8" or cm.module is None:
        return ""
    layers = len(cm.module.attributes.get("tf.quantized", ()))
    return (f"{layers} layer(s) in int8 (tensorforge.quantize's choice: by default the first and last "
            f"of more than two stay float32, as does everything but contractions)")


def _check(outs: list, refs: list | None, lm: LoadedModel, tol: float | None, precision: str = "f32") -> dict:
    if refs is None:
        note = ("a .tfm file has no reference model; bench its zoo name or .onnx file to check outputs"
                if lm.kind == "tfm" else lm.reference_note or "no reference")
        return {"reference": None, "max_rel_err": None, "ok": True, "tol": tol, "note": note}
    err = max_rel_err_all(outs, refs)
    out = {"reference": lm.reference_name, "max_rel_err": err, "ok": tol is None or bool(err <= tol), "tol": tol,
           "max_abs_diff": max_abs_diff_all(outs, refs), "top1": top1_agreement(outs, refs)}
    if tol is None:
        out["note"] = f"{precision}: reported, not checked (--tol sets a limit)"
    return out


def _contender_row(c: Contender, timings: dict, refs: list | None, model: dict, block: int) -> dict:
    t = timings[c.key]
    tf = timings["tensorforge"]
    median_s = t.median_ms / 1e3
    r = {"key": c.key, "name": c.label, "median_ms": t.median_ms, "min_ms": t.min_ms,
         "rounds": len(t.samples) // block, "samples": len(t.samples), "noise": quartile_spread(t.samples), "setup_s": c.setup_s,
         "max_rel_err": None if refs is None else max_rel_err_all(c.outputs, refs),
         "precision": c.precision, "note": c.note}
    if refs is not None:
        r["max_abs_diff"], r["top1"] = max_abs_diff_all(c.outputs, refs), top1_agreement(c.outputs, refs)
    if c.key != "tensorforge":
        r["tf_speedup"] = t.median_ms / tf.median_ms
        r["tf_speedup_rounds"], r["tf_speedup_noise"] = ratio_stats(t.samples, tf.samples)
    tuned = timings.get("tensorforge-tuned")
    if tuned is not None and c.key != "tensorforge-tuned":    # the untuned row's: what tuning gained
        r["tuned_speedup"] = t.median_ms / tuned.median_ms
    if model["gflop"] is not None:
        r["gflops"] = model["gflop"] / median_s
        r["gbs"] = model["mbytes"] / 1e3 / median_s
        if model.get("peak_gflops"):
            r["pct_peak"] = 100 * r["gflops"] / model["peak_gflops"]
            r["pct_bandwidth"] = 100 * r["gbs"] / model["bandwidth_gbs"]
    return r
