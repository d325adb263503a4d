"""`tensorforge run MODEL --inputs a.npy ...`: run a compiled model on arrays from files (or random
ones) and print what came out and how long it took.

MODEL is usually a .tfm file from `tensorforge compile`; a zoo name or .onnx file is compiled
first.  Exit codes: 0 ran, 1 a tensorforge error (bad file, wrong input shape), 2 bad usage.
"""
from __future__ import annotations

import argparse
import textwrap
import os
import statistics
import time

import numpy as np


def _read_inputs(paths: list[str], specs) -> list[np.ndarray]:
    """Arrays from .npy files in input order, or one .npz whose keys are the input names."""
    from ..errors import TensorforgeError
    if len(paths) == 1 and paths[0].endswith(".npz"):
        with _open_array(paths[0]) as npz:
            missing = [s.name for s in specs if s.name not in npz.files]
            if missing:
                raise TensorforgeError(f"{paths[0]} has no array named {', '.join(missing)} "
                                       f"(it has {', '.join(npz.files) or 'none'})")
            return [npz[s.name] for s in specs]
    if len(paths) != len(specs):
        wanted = ", ".join(s.describe() for s in specs)
        raise TensorforgeError(f"the model takes {len(specs)} input(s) ({wanted}), "
                               f"--inputs gave {len(paths)} file(s)")
    return [_open_array(p) for p in paths]


def _open_array(path: str):
    from ..errors import TensorforgeError
    if not os.path.isfile(path):
        raise TensorforgeError(f"--inputs {path}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise TensorforgeError(f"--inputs {path}: not a NumPy .npy/.npz file ({e})") from None


def _stats_line(name: str, a: np.ndarray) -> str:
    head = f"  {name}: {a.dtype}{list(a.shape)}"
    if a.size == 0:
        return head
    x = a.astype(np.float64)
    finite = np.isfinite(x)
    extra = "" if finite.all() else f"  non-finite {int((~finite).sum())}"
    return (f"{head}  min {np.nanmin(x):.4g}  max {np.nanmax(x):.4g}  mean {np.nanmean(x):.4g}  "
            f"std {np.nanstd(x):.4g}{extra}")


def _time(cm, inputs, repeats: int) -> list[float]:
    """Seconds per call after one warm-up call, with a progress bar when it takes over a second."""
    from ..progress import Progress
    t0 = time.perf_counter()
    cm.run(*inputs)
    first = time.perf_counter() - t0
    samples = []
    with Progress("timing", total=repeats, enabled=first * repeats > 1.0) as bar:
        for _ in range(repeats):
            t0 = time.perf_counter()
            cm.run(*inputs)
            samples.append(time.perf_counter() - t0)
            bar.advance()
    return samples


def _cmd_run(args: argparse.Namespace) -> int:
    from .compile import compile_loaded
    from .loading import db_option, example_shapes, load_model, parse_shapes, random_inputs

    sizes = parse_shapes(args.shape)
    lm = load_model(args.model, args.batch, sizes, seed=args.seed, threads=args.threads)
    if lm.kind == "tfm":
        cm = lm.compile(threads=args.threads)
    else:
        cm = compile_loaded(lm, args.threads, db_option(args.db), fast_math=args.fast_math, target=args.target)
    if args.describe:
        print(f"{lm.name}:")
        print(textwrap.indent(cm.describe(), "  "))
        return 0
    specs = cm.native.inputs
    if args.inputs:
        inputs = _read_inputs(args.inputs, specs)
    else:
        shapes = example_shapes(specs, cm.symbols, sizes if lm.kind == "tfm" else {}, args.batch if lm.kind == "tfm"
                                else None, lm.name)
        inputs = random_inputs([(shape, s.np_dtype) for shape, s in zip(shapes, specs)], args.seed)
    outs = cm.run(*inputs)
    samples = _time(cm, inputs, args.repeats) if args.repeats > 0 else []
    where = f"{cm.threads} thread(s)" if cm.target == "cpu" else f"target {cm.target}"
    print(f"{lm.name}: {len(inputs)} input(s), {len(outs)} output(s), {where}")
    for s, a in zip(cm.native.outputs, outs):
        print(_stats_line(s.name, a))
    if samples:
        print(f"latency: median {statistics.median(samples) * 1e3:.3f} ms, min {min(samples) * 1e3:.3f} ms "
              f"over {len(samples)} run(s)")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        names = _file_names([s.name for s in cm.native.outputs])
        for name, a in zip(names, outs):
            np.save(os.path.join(args.out, name + ".npy"), a)
        print(f"wrote {', '.join(n + '.npy' for n in names)} to {args.out}")
    return 0


def _file_names(names: list[str]) -> list[str]:
    """Output names made safe as file names (and unique)."""
    out = []
    for i, n in enumerate(names):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in n).strip(".") or f"output{i}"
        out.append(safe if safe not in out else f"{safe}_{i}")
    return out


def register(sub) -> None:
    from .loading import add_db_argument, add_fast_math_argument, add_model_arguments
    p = sub.add_parser(
        "run", help="run a compiled .tfm model on .npy inputs (or random ones): output stats and latency",
        description=textwrap.fill("Runs MODEL (a .tfm file from `tensorforge compile`; a zoo name or .onnx file is compiled "
                    "first) on the given inputs, prints each output's shape and statistics and the median "
                    "latency, and with --out saves the outputs as .npy files named after the outputs.", 79),
        epilog="examples:\n  tensorforge run resnet18.tfm --random\n"
               "  tensorforge run resnet18.tfm --random --shape batch=3   # a model compiled with a range\n"
               "  tensorforge run resnet18.tfm --describe\n"
               "  tensorforge run model.tfm --inputs x.npy mask.npy --out results/\n"
               "  tensorforge run model.tfm --inputs inputs.npz     # arrays named like the inputs",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--inputs", nargs="+", metavar="FILE",
                     help=".npy files in input order, or one .npz with an array per input name")
    src.add_argument("--random", action="store_true",
                     help="random inputs of the model's shapes (floats ~ N(0,1), integers 0/1), from --seed); "
                          "a dynamic model's at the --shape sizes (e.g. --shape batch=3), else its hints")
    src.add_argument("--describe", action="store_true",
                     help="print the model's inputs and outputs (symbolic dims with their ranges) and exit")
    p.add_argument("--out", metavar="DIR", default=None, help="write every output to DIR/<output name>.npy")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="threads to run on (default: all cores)")
    p.add_argument("--target", choices=("cpu", "opencl", "cuda"), default="cpu",
                   help="compile a zoo model or .onnx file for this backend (docs/gpu.md; default cpu)")
    add_db_argument(p)
    add_fast_math_argument(p)
    p.add_argument("--repeats", type=int, default=10, help="timed runs for the latency (default 10; 0: none)")
    p.set_defaults(fn=_cmd_run)
