"""`tensorforge bench`: tensorforge against torch eager, torch.compile and onnxruntime.

``--precision int8|bf16`` times tensorforge at that precision against onnxruntime (int8: the model
quantized by onnxruntime's ``quantize_static`` on the same calibration samples; bf16: onnxruntime
float32, it has no bf16 CPU path) and reports each one's agreement with the float32 reference.

Exit codes: 0 when every model's outputs match its reference, 3 when one does not, 1 for a
tensorforge error (bad MODEL, unsupported op), 2 for bad usage.
"""
from __future__ import annotations

import argparse
import textwrap
import sys

DEFAULT_MODELS = ("resnet18", "bert_base")
BENCH_PRECISIONS = ("f32", "int8", "bf16")
EXIT_MISMATCH = 3


def _peer_list(text: str) -> list[str]:
    from ..benchmark.peers import PEERS
    names = [s.strip() for s in text.split(",") if s.strip()]
    if names in (["all"],):
        return list(PEERS)
    if names in (["none"], []):
        return []
    bad = [n for n in names if n not in PEERS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown peer {', '.join(bad)} (choose from {', '.join(PEERS)}, "
                                         f"all or none)")
    return names


def add_bench_arguments(p: argparse.ArgumentParser, repeats: int, json_path: str, chart_path: str) -> None:
    """The options ``bench`` and ``demo`` share (the demo only changes the defaults)."""
    from ..benchmark.peers import PEERS
    from .loading import add_db_argument, add_fast_math_argument
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for every contender (default: all cores)")
    p.add_argument("--peers", type=_peer_list, default=None, metavar="LIST",
                   help=f"comma-separated peers to time against tensorforge: {','.join(PEERS)} "
                        f"(default: all, onnxruntime alone with --precision; 'none' for tensorforge alone)")
    p.add_argument("--precision", choices=BENCH_PRECISIONS, default="f32",
                   help="tensorforge's precision: int8 (post-training, calibrated) against onnxruntime's "
                        "quantize_static model on the same samples; bf16 against onnxruntime float32 "
                        "(default f32)")
    p.add_argument("--calibration", default=None, metavar="DATA.npz",
                   help="--precision int8: calibration samples (as `tensorforge quantize` reads them; default: "
                        "--calibration-samples drawn from the model's input generator)")
    p.add_argument("--calibration-samples", type=int, default=8, metavar="N",
                   help="--precision int8 without --calibration: how many samples to draw (default 8)")
    p.add_argument("--repeats", type=int, default=repeats, help=f"timed rounds per model (default {repeats})")
    p.add_argument("--warmup", type=int, default=2, help="untimed rounds first (default 2)")
    p.add_argument("--budget-s", type=float, default=120.0, metavar="S",
                   help="stop timing a model after S seconds (at least 3 rounds; default 120)")
    p.add_argument("--tol", type=float, default=None,
                   help="largest max relative error against the reference (default 1e-4; with --precision "
                        "int8/bf16 the error is reported, and checked only when --tol is given)")
    p.add_argument("--roofline", action="store_true",
                   help="measure the machine's peak GEMM GFLOP/s and copy bandwidth and cache them "
                        "(otherwise the cached values are used, if any)")
    add_db_argument(p)
    add_fast_math_argument(p)
    p.add_argument("--json", default=json_path, metavar="PATH", help=f"results as JSON (default {json_path})")
    p.add_argument("--chart", default=chart_path, metavar="PATH",
                   help=f"PNG bar chart of latencies relative to tensorforge (default {chart_path})")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def run_bench(args: argparse.Namespace, measure_roofline: bool | None = None) -> int:
    """Runs the benchmark the parsed ``args`` describe, prints the table, writes JSON and chart.

    ``measure_roofline`` None: measure only with ``--roofline``; True: also when nothing is cached.
    """
    from ..benchmark.report import format_table, write_chart, write_json
    from ..benchmark.roofline import get_roofline
    from ..benchmark.runner import BenchConfig, bench_models, default_threads
    from ..errors import TensorforgeError
    from .loading import db_option, parse_shapes

    from ..benchmark.peers import PEERS

    threads = args.threads or default_threads()
    if threads < 1 or args.repeats < 1 or args.warmup < 0:
        raise TensorforgeError("--threads and --repeats must be at least 1 and --warmup at least 0")
    reduced = args.precision != "f32"
    if args.calibration and args.precision != "int8":
        raise TensorforgeError("--calibration needs --precision int8")
    if args.calibration_samples < 1:
        raise TensorforgeError("--calibration-samples must be at least 1")
    peers = args.peers if args.peers is not None else (["onnxruntime"] if reduced else list(PEERS))
    tol = args.tol if args.tol is not None or reduced else 1e-4
    roofline = get_roofline(measure=False)
    if args.roofline or (measure_roofline and roofline is None):
        print("measuring the machine's peak GEMM GFLOP/s and copy bandwidth ...", file=sys.stderr, flush=True)
        roofline = get_roofline(measure=True)
    cfg = BenchConfig(threads=threads, repeats=args.repeats, warmup=args.warmup, budget_s=args.budget_s,
                      peers=peers, tol=tol, progress=args.progress, batch=args.batch,
                      shapes=parse_shapes(args.shape), seed=args.seed,
                      db=db_option(args.db), fast_math=args.fast_math, precision=args.precision,
                      calibration=args.calibration, calibration_samples=args.calibration_samples)
    result = bench_models(args.models, cfg, roofline)
    print(format_table(result))
    write_json(result, args.json)
    write_chart(result, args.chart)
    print(f"\nwrote {args.json} and {args.chart}")
    bad = [m["model"] for m in result["models"] if not m["check"]["ok"]]
    if bad:
        print(f"tensorforge: output mismatch in {', '.join(bad)}", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


def register(sub) -> None:
    from .loading import add_model_arguments
    p = sub.add_parser(
        "bench", help="time tensorforge against torch eager, torch.compile and onnxruntime",
        description=textwrap.fill("Compiles each MODEL, checks its outputs against the reference (PyTorch for zoo models, "
                    "onnxruntime for .onnx files), then times tensorforge and every installed peer on the same "
                    "inputs and weights, interleaved, and prints medians, speedups, compile times and "
                    "GFLOP/s. Writes the results as JSON and a PNG chart. Exit status 3 means an output "
                    "mismatch.", 79),
        epilog="examples:\n  tensorforge bench                       # resnet18 and bert_base\n"
               "  tensorforge bench mlp --batch 64 --peers eager,onnxruntime --threads 1\n"
               "  tensorforge bench model.onnx --shape N=1 --roofline\n"
               "  tensorforge bench bert_base --precision int8 --calibration ids.npz\n"
               "  tensorforge bench mlp --precision bf16",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p, nargs="*", default=list(DEFAULT_MODELS))
    add_bench_arguments(p, repeats=10, json_path="tensorforge-bench.json", chart_path="tensorforge-bench.png")
    p.set_defaults(fn=run_bench)
