"""`tensorforge demo`: the product in one command.

Compiles the zoo's resnet18 and bert_base, checks their outputs against PyTorch and prints the
``bench`` table against every installed peer, with the chart; it is ``tensorforge bench`` with
demo defaults (few repeats, files under build/demo/, the machine's peak measured on first use).
"""
from __future__ import annotations

import argparse

from .bench import add_bench_arguments, run_bench

DEMO_MODELS = ("resnet18", "bert_base")


def _cmd_demo(args: argparse.Namespace) -> int:
    args.shape, args.seed = [], 0
    return run_bench(args, measure_roofline=True)


def register(sub) -> None:
    d = sub.add_parser(
        "demo", help="compile resnet18 and bert_base, check them and benchmark them against the peers",
        description="Compiles the zoo's resnet18 and bert_base, checks their outputs against PyTorch and "
                    "prints the `tensorforge bench` table against every installed peer, writing JSON and a "
                    "chart under build/demo/. Exit status 3 means an output mismatch.")
    d.add_argument("models", metavar="MODEL", nargs="*", default=list(DEMO_MODELS),
                   help=f"zoo names or model files (default: {' '.join(DEMO_MODELS)})")
    d.add_argument("--batch", type=int, default=None, metavar="B", help="batch size (default: each model's)")
    add_bench_arguments(d, repeats=5, json_path="build/demo/bench.json", chart_path="build/demo/bench.png")
    d.set_defaults(fn=_cmd_demo)
