"""`tensorforge export-mlir MODEL --level structured|loop -o out.mlir`: a model as upstream MLIR text.

The text verifies in ``mlir-opt`` with registered dialects only (docs/mlir.md), so upstream tools
can lower it; ``--verify`` runs ``mlir-opt`` on it before saying it is done.  Exit codes: 0
written, 1 a tensorforge error (including a failed --verify), 2 bad usage.
"""
from __future__ import annotations

import argparse
import sys
import textwrap


def _cmd_export_mlir(args: argparse.Namespace) -> int:
    from ..codegen.mlir.export import export_mlir, verify_mlir
    from .loading import load_model, parse_shapes

    lm = load_model(args.model, args.batch, parse_shapes(args.shape), seed=args.seed)
    text = export_mlir(lm.import_module(), level=args.level)
    if args.verify:
        verify_mlir(text)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    with open(args.output, "w") as f:
        f.write(text)
    checked = ", verified by mlir-opt" if args.verify else ""
    print(f"exported {lm.name} ({args.level} level, {len(text) / 1e6:.1f} MB{checked}) -> {args.output}")
    return 0


def register(sub) -> None:
    from .loading import add_model_arguments
    p = sub.add_parser(
        "export-mlir", help="export a model as upstream MLIR (linalg on tensors, or scf/memref loops)",
        description=textwrap.fill("Imports and optimises MODEL as `tensorforge compile` does and writes it as an "
                                  "upstream MLIR module that mlir-opt verifies without "
                                  "--allow-unregistered-dialect: the structured level as linalg.generic ops on "
                                  "tensors, the loop level as scf/memref kernel functions plus a @main over "
                                  "memrefs (inputs, then outputs) with the C interface. Shapes must be static.", 79),
        epilog="examples:\n  tensorforge export-mlir resnet18_small --level loop -o resnet18.mlir\n"
               "  tensorforge export-mlir model.onnx --shape N=1 -o model.mlir --verify",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("--level", choices=("structured", "loop"), default="structured",
                   help="structured: linalg.generic on tensors (default); loop: scf/memref functions")
    p.add_argument("-o", "--output", required=True, metavar="OUT.mlir", help="where to write the module ('-': stdout)")
    p.add_argument("--verify", action="store_true", help="check the module with mlir-opt(-19) before writing it")
    p.set_defaults(fn=_cmd_export_mlir)
