"""`tensorforge tune MODEL`: tune every kernel of a model into a tuning database.

    tensorforge tune resnet50 --trials 400 --db tune.sqlite --time-budget 1200
    tensorforge tune bert_base --shape batch=1..64 --shape seq=1..512   # one record per kernel for every size
    tensorforge compile resnet50 -o r50.tfm        # applies the default database's records
    tensorforge tune resnet18 resnet50 --trials 800 # several models: every shared kernel tuned once
    tensorforge tune bert_base --ray local:2       # build and measure on a throwaway 2-node Ray cluster

MODEL is a zoo name or an .onnx file (see ``loading.py``); several MODELs are tuned together: the
union of their tasks, each kernel they share tuned once, weighed by its share of all their
latency (``tune/multi.py``).  ``--ray ADDRESS`` builds candidates on any node of a Ray cluster and
measures them on the nodes whose target matches (``tune/distributed``).  A progress bar shows, per batch, the
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
    if args.ray is not None:
        from ..tune.distributed import require_ray
        require_ray()                   # before loading models: a missing extra is one line, at once
    if args.ray is not None and args.target != "cpu":
        raise TensorforgeError("--ray tunes CPU targets only: drop --target or --ray")
    if len(args.model) > 1 and args.target != "cpu":
        raise TensorforgeError("several models are tuned together on the CPU target only: tune GPU models one by one")
    sizes, ranges = parse_shape_specs(args.shape)
    modules = {name: load_model(name, args.batch, sizes, ranges=ranges).import_module() for name in args.model}
    db = args.db or default_db_path()
    if args.target != "cpu":
        from ..tune.gpu import tune_gpu
        report = tune_gpu(modules[args.model[0]], target=args.target, trials=args.trials, db=db,
                          timeout_s=args.time_budget, seed=args.seed, progress=not args.quiet)
    else:
        model = modules if len(modules) > 1 else next(iter(modules.values()))
        report = tune(model, trials=args.trials, db=db, timeout_s=args.time_budget,
                      progress=not args.quiet, batch_size=args.measure_batch, per_task=args.per_task, kinds=kinds,
                      seed=args.seed, cluster=args.ray, model_check=not args.no_model_check)
    print(report)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report.to_dict(), f, indent=1)
    return 0


def register(sub) -> None:
    p = sub.add_parser("tune", help="tune the kernels of a model into a tuning database",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("model", nargs="+", help="zoo names (tensorforge zoo) or .onnx files; several are tuned together")
    p.add_argument("--trials", type=int, default=64,
                   help="measured candidates for the whole model, records already in the db included (default 64)")
    p.add_argument("--db", help="tuning database file (default: $TENSORFORGE_TUNE_DB or the user cache dir)")
    p.add_argument("--batch", type=int, help="the model's batch size (zoo models, symbolic leading ONNX dims)")
    p.add_argument("--shape", action="append", metavar="NAME=VALUE|NAME=MIN..MAX",
                   help="a symbolic dimension's value, or its range: the kernels are tuned once for the "
                        "whole range (measured at the example size)")
    p.add_argument("--time-budget", type=float, metavar="S", help="the whole run's budget: the search stops early enough to leave the confirmation and the model check their estimated time (docs/tuning.md)")
    p.add_argument("--measure-batch", type=int, default=8, metavar="K",
                   help="candidates measured per batch, one database transaction each (default 8)")
    p.add_argument("--per-task", type=int, metavar="N", help="at most N records per task")
    kinds = "gemm,conv,depthwise,int8,blocked,loop,fusion"   # tune/tasks.KINDS (not imported: the CLI starts light)
    p.add_argument("--kinds", default=kinds,
                   help=f"task kinds to tune (default {kinds}; int8: a quantized model's int8 GEMMs and "
                        f"convolutions; fusion: the band of a depthwise and a 1x1 convolution run as one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", choices=("cpu", "opencl", "cuda"), default="cpu",
                   help="tune for this backend: opencl/cuda vary the GPU schedules' tiles and threads per "
                        "block (docs/gpu.md), measured on the OpenCL driver or an NVIDIA GPU")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="build and measure on a Ray cluster: its address (host:port, ray://..., auto), or local:N "
                        "for a throwaway local cluster of N worker nodes (needs pip install 'tensorforge[ray]')")
    p.add_argument("--no-model-check", action="store_true",
                   help="skip timing the tuned kernels inside the model against the default after the "
                        "confirmation (a tuned config then stands on its timing alone)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(fn=_cmd_tune)
