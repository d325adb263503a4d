"""`tensorforge compile MODEL -o out.tfm`: compile once, save a file that runs without torch or onnx.

Exit codes: 0 saved (and, unless --no-check, outputs match the reference), 3 saved but the
outputs differ from the reference, 1 a tensorforge error, 2 bad usage.
"""
from __future__ import annotations

import argparse
import textwrap
import os
import sys
import time

EXIT_MISMATCH = 3


def describe_specs(specs) -> str:
    """``'x' float32[1, 784], ...`` for the inputs or outputs of a compiled model."""
    return ", ".join(s.describe() for s in specs)


def describe_symbols(table) -> str:
    """``batch in 1..64, seq in 1..512``: the ranges a dynamic model runs at."""
    return ", ".join(f"{n} in {r.describe()}" for n, r in table.ranges.items())


def compile_loaded(lm, threads: int | None, db="auto", label: str = "compiling", fast_math: bool = False,
                   target: str = "cpu"):
    """``lm`` compiled to a native model, under a progress bar (compiling takes seconds);
    ``db``, ``fast_math`` and ``target`` as in ``tensorforge.compile``."""
    from ..progress import Progress
    with Progress(f"{label} {lm.name}", total=2) as bar:
        bar.set_note("importing and optimising")
        graph = lm.import_module()
        bar.advance(note="generating and compiling C" if target == "cpu" else f"generating {target} kernels")
        import tensorforge
        if target != "cpu":
            return tensorforge.compile(graph, target=target, db=None)
        cm = tensorforge.compile(graph, threads=threads, db=db, fast_math=fast_math)
        bar.advance(note="done")
    return cm


def _cmd_compile(args: argparse.Namespace) -> int:
    from ..benchmark.stats import max_rel_err_all
    from ..errors import TensorforgeError
    from .loading import db_option, load_model, model_kind, parse_shape_specs

    if model_kind(args.model) == "tfm":
        raise TensorforgeError(f"'{args.model}' is already compiled; run it with `tensorforge run {args.model}`")
    if not args.output.endswith(".tfm"):
        raise TensorforgeError(f"-o {args.output}: the output file must end in .tfm")
    sizes, ranges = parse_shape_specs(args.shape)
    lm = load_model(args.model, args.batch, sizes, seed=args.seed, threads=args.threads, ranges=ranges)
    t0 = time.perf_counter()
    cm = compile_loaded(lm, args.threads, db_option(args.db), fast_math=args.fast_math)
    compile_s = time.perf_counter() - t0
    status = 0
    if args.check and lm.reference is None and lm.reference_note:
        print(f"outputs not checked: {lm.reference_note}")
    if args.check and lm.reference is not None:
        err = max_rel_err_all(cm.run(*lm.inputs), lm.reference(lm.inputs))
        ref = lm.reference_name
        if err <= args.tol:
            print(f"outputs match {ref} (max relative error {err:.1e})")
        else:
            print(f"tensorforge: output mismatch against {ref}: max relative error {err:.1e} > {args.tol:.0e}",
                  file=sys.stderr)
            status = EXIT_MISMATCH
    cm.save(args.output, include_graph=args.graph)
    size_mb = os.path.getsize(args.output) / 1e6
    print(f"compiled {lm.name} in {compile_s:.1f} s -> {args.output} ({size_mb:.1f} MB)")
    print(f"  inputs:  {describe_specs(cm.native.inputs)}")
    print(f"  outputs: {describe_specs(cm.native.outputs)}")
    if cm.symbols.ranges:
        print(f"  symbols: {describe_symbols(cm.symbols)}")
    return status


def register(sub) -> None:
    from .loading import add_db_argument, add_fast_math_argument, add_model_arguments
    p = sub.add_parser(
        "compile", help="compile a model into a .tfm file that `tensorforge run` (or tensorforge.load) runs",
        description=textwrap.fill("Compiles MODEL for this machine and saves it as one .tfm file holding the library, "
                    "its C source and the weights; loading it needs only NumPy. The compiled model's "
                    "outputs are checked against the reference (PyTorch for zoo models, onnxruntime for "
                    ".onnx files) on example inputs first; exit status 3 means they differ.", 79),
        epilog="examples:\n  tensorforge compile resnet18 -o resnet18.tfm --batch 8\n"
               "  tensorforge compile resnet18 -o resnet18.tfm --shape batch=1..64   # any batch 1..64\n"
               "  tensorforge compile bert_base -o bert.tfm --shape batch=1..64 --shape seq=1..512\n"
               "  tensorforge compile model.onnx --shape N=1 -o model.tfm",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.tfm", help="where to write the compiled model")
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="threads for the output check (the saved model runs on all cores unless "
                        "`tensorforge run --threads` says otherwise)")
    add_db_argument(p)
    add_fast_math_argument(p)
    p.add_argument("--no-check", dest="check", action="store_false", help="skip the output check")
    p.add_argument("--no-graph", dest="graph", action="store_false",
                   help="leave the optimised graph out of the file (smaller by about the weights' size; "
                        "`explain` and `tune` then need the original model)")
    p.add_argument("--tol", type=float, default=1e-4,
                   help="largest max relative error the check accepts (default 1e-4)")
    p.set_defaults(fn=_cmd_compile)
