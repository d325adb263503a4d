"""`tensorforge tune MODEL`: tune every kernel of a model into a tuning database.

    tensorforge tune resnet50 --trials 400 --db tune.sqlite --time-budget 1200
    tensorforge tune bert_base --shape batch=1..64 --shape seq=1..512   # one record per kernel for every size
    tensorforge compile resnet50 -o r50.tfm        # applies the default database's records

MODEL is a zoo name or an .onnx file (see ``loading.py``).  A progress bar shows, per batch, the
task being tuned, its trials, its best GFLOP/s and the time left; the end prints per task the
trials, default and best latency and the speedup.  Records already in the database count against
``--trials``: running the same command again measures nothing.
"""
from __future__ import annotations

import argparse
import json


def _cmd_tune(args: argparse.Namespace) -> int:
    from ..tune.api import default_db_path, tune
    from ..tune.tasks import KINDS
    from .loading import load_model, parse_shape_specs
    from ..errors import TensorforgeError
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise TensorforgeError(f"--kinds: unknown task kind(s) {sorted(unknown)} (choose from {', '.join(KINDS)})")
    sizes, ranges = parse_shape_specs(args.shape)
    lm = load_model(args.model, args.batch, sizes, ranges=ranges)
    db = args.db or default_db_path()
    if args.target != "cpu":
        from ..tune.gpu import tune_gpu
        report = tune_gpu(lm.import_module(), target=args.target, trials=args.trials, db=db,
                          timeout_s=args.time_budget, seed=args.seed, progress=not args.quiet)
    else:
        report = tune(lm.import_module(), trials=args.trials, db=db, timeout_s=args.time_budget,
                      progress=not args.quiet, batch_size=args.measure_batch, per_task=args.per_task, kinds=kinds,
                      seed=args.seed)
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    return 0


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune the kernels of a model into a tuning database",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="a zoo name (tensorforge zoo) or an .onnx file")
    p.add_argument("--trials", type=int, default=64,
                   help="measured candidates for the whole model, records already in the db included (default 64)")
    p.add_argument("--db", help="tuning database file (default: $TENSORFORGE_TUNE_DB or the user cache dir)")
    p.add_argument("--batch", type=int, help="the model's batch size (zoo models, symbolic leading ONNX dims)")
    p.add_argument("--shape", action="append", metavar="NAME=VALUE|NAME=MIN..MAX",
                   help="a symbolic dimension's value, or its range: the kernels are tuned once for the "
                        "whole range (measured at the example size)")
    p.add_argument("--time-budget", type=float, metavar="S", help="stop starting new batches after S seconds")
    p.add_argument("--measure-batch", type=int, default=8, metavar="K",
                   help="candidates measured per batch, one database transaction each (default 8)")
    p.add_argument("--per-task", type=int, metavar="N", help="at most N records per task")
    p.add_argument("--kinds", default="gemm,conv,loop", help="task kinds to tune (default gemm,conv,loop)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", choices=("cpu", "opencl", "cuda"), default="cpu",
                   help="tune for this backend: opencl/cuda vary the GPU schedules' tiles and threads per "
                        "block (docs/gpu.md), measured on the OpenCL driver or an NVIDIA GPU")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=_cmd_tune)
