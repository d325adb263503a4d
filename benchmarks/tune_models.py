"""Tune whole zoo models end to end and time tuned vs untuned vs torch eager / torch.compile / onnxruntime.

    .venv/bin/python benchmarks/tune_models.py                               # resnet50, bert_base
    .venv/bin/python benchmarks/tune_models.py resnet50 --trials 400 --time-budget 1200 --db m.sqlite

Per model: ``tensorforge.tune`` with the stated trial budget and time budget (records already in the
database count against the budget: a rerun with the same --db measures nothing and reproduces the
tuned build), then the tuned build (compile with the db), the untuned build (db=None) and the peers
(``tensorforge.benchmark.peers``) are checked against torch and timed in alternating blocks with
pauses (``tune_timing.py``) on the same inputs.
The machine is shared with other work: compare ratios within one run.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def bench_model(name: str, args) -> dict:
    import numpy as np

    import tensorforge
    from tensorforge.benchmark.peers import PeerUnavailable, make_peer
    from tune_timing import time_blocks
    from tensorforge.commands.loading import load_model

    lm = load_model(name, args.batch)
    module = lm.import_module()
    t0 = time.perf_counter()
    report = tensorforge.tune(module, trials=args.trials, db=args.db, timeout_s=args.time_budget,
                              batch_size=args.measure_batch)
    tune_s = time.perf_counter() - t0
    print(report)
    t0 = time.perf_counter()
    tuned = tensorforge.compile(lm.import_module(), db=args.db, threads=args.threads)
    compile_s = time.perf_counter() - t0
    untuned = tensorforge.compile(lm.import_module(), db=None, threads=args.threads)
    refs = [np.asarray(r) for r in lm.reference(lm.inputs)]
    errs = {}
    for key, cm in (("tuned", tuned), ("untuned", untuned)):
        outs = cm.run(*lm.inputs)
        errs[key] = max(float(np.abs(o - r).max() / max(np.abs(r).max(), 1e-12)) for o, r in zip(outs, refs))
    contenders = {"tuned": lambda: tuned.run(*lm.inputs), "untuned": lambda: untuned.run(*lm.inputs)}
    notes = {}
    for peer in args.peers.split(","):
        try:
            c = make_peer(peer, lm, args.threads)
            contenders[peer] = c.run
        except PeerUnavailable as e:
            notes[peer] = str(e)
    blocks = time_blocks(contenders, rounds=args.rounds, reps=3)
    ms = {k: statistics.median(v) * 1e3 for k, v in blocks.items()}
    return {"model": name, "trials": report.trials, "tasks": len(report.tasks), "tune_s": tune_s,
            "stopped": report.stopped, "records": sum(t.records for t in report.tasks),
            "tuned_kernels": tuned.native.build.get("tuned_kernels"), "compile_with_db_s": compile_s,
            "confirmed": {"tuned": sum(t.best_config is not None and t.decision != "unconfirmed" for t in report.tasks),
                          "default kept": sum(t.decision == "default kept" for t in report.tasks),
                          "unconfirmed": sum(t.decision == "unconfirmed" for t in report.tasks)},
            "rel_err": errs, "ms": ms, "speedup_over_untuned": ms["untuned"] / ms["tuned"],
            "notes": notes, "kernel_estimate_ms": {"default": report.model_estimate("default_s") * 1e3,
                                                   "tuned": report.model_estimate("applied_s") * 1e3}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=["resnet50", "bert_base"])
    ap.add_argument("--trials", type=int, default=400, help="trial budget per model (default 400)")
    ap.add_argument("--time-budget", type=float, default=1200.0, help="tuning seconds per model (default 1200)")
    ap.add_argument("--db", default=None, help="tuning database (default: the default database)")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--measure-batch", type=int, default=8)
    ap.add_argument("--peers", default="eager,inductor,onnxruntime")
    ap.add_argument("--json", help="write the results as JSON")
    args = ap.parse_args()
    import torch
    torch.set_num_threads(args.threads)
    results = [bench_model(m, args) for m in args.models]
    cols = ["tuned", "untuned", *args.peers.split(",")]
    print(f"\n{'model':10s} {'trials':>6s} {'tune s':>7s} " + " ".join(f"{c:>11s}" for c in cols)
          + f" {'tuned/untuned':>13s}")
    for r in results:
        cells = " ".join(f"{r['ms'][c]:11.2f}" if c in r["ms"] else f"{'-':>11s}" for c in cols)
        print(f"{r['model']:10s} {r['trials']:6d} {r['tune_s']:7.0f} {cells} {r['speedup_over_untuned']:13.2f}x")
        print(f"  confirmation per task: {r['confirmed']}")
        for peer, why in r["notes"].items():
            print(f"  ({peer} skipped: {why})")
    print(f"(ms, medians of {args.rounds} alternating blocks, {args.threads} threads; shared machine: "
          "compare within a row)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
