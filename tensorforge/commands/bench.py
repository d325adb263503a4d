"""`tensorforge bench`: tensorforge against torch eager, torch.compile and onnxruntime.

``--precision int8|bf16`` times tensorforge at that precision against onnxruntime (int8: the model
quantized by onnxruntime's ``quantize_static`` on the same calibration samples; bf16: onnxruntime
float32, it has no bf16 CPU path) and reports each one's agreement with the float32 reference.

A MODEL may also be a JAX function: a built-in name of ``tensorforge.models.jax_models``
(``jax_mlp``, ``jax_cnn``, ...) or ``FILE.py:FACTORY``, where ``FACTORY()`` (``FACTORY(batch=B)``
with ``--batch``) returns ``(fn, example_inputs)``.  A factory rather than a function plus input
files, because the function's inputs (parameters included) are easiest to build in Python next
to it.  tensorforge imports it as ``tensorforge.compile(fn, example_inputs)`` does (jax lowers it
to StableHLO, the StableHLO frontend imports that) and compiles the graph like any other bench
model, so that its flops and bytes are reported too; the reference and the one default peer are
``jax.jit(fn)`` on XLA's CPU backend.

Exit codes: 0 when every model's outputs match its reference, 3 when one does not, 1 for a
tensorforge error (bad MODEL, unsupported op), 2 for bad usage.
"""
from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re
import sys
import textwrap
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..errors import TensorforgeError
from .loading import LoadedModel

if TYPE_CHECKING:
    from ..benchmark.roofline import Roofline
    from ..benchmark.runner import BenchConfig

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
                        f"(default: those that can run the model: all but jax, onnxruntime alone with "
                        f"--precision, jax alone for a JAX model; 'none' for tensorforge alone)")
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
    p.add_argument("--tuned", default=None, metavar="DB",
                   help="also time tensorforge compiled with this tuning database's records (the 'tensorforge "
                        "tuned' row; pair it with --db none for an untuned tensorforge row)")
    p.add_argument("--tune-budget", type=float, default=None, metavar="S",
                   help="with --tuned: first tune each model into DB for up to S seconds (tensorforge tune "
                        "--time-budget S); the table states the time each took")
    p.add_argument("--tune-trials", type=int, default=100_000, metavar="N",
                   help="with --tune-budget: at most N measured candidates per model, records already in DB "
                        "included (default 100000: the budget ends the tuning)")
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
    from ..benchmark.runner import BenchConfig, default_threads
    from .loading import db_option, parse_shapes

    threads = args.threads or default_threads()
    if threads < 1 or args.repeats < 1 or args.warmup < 0:
        raise TensorforgeError("--threads and --repeats must be at least 1 and --warmup at least 0")
    reduced = args.precision != "f32"
    if args.calibration and args.precision != "int8":
        raise TensorforgeError("--calibration needs --precision int8")
    if args.calibration_samples < 1:
        raise TensorforgeError("--calibration-samples must be at least 1")
    tol = args.tol if args.tol is not None or reduced else 1e-4
    if args.tune_budget is not None and (args.tuned is None or args.tune_budget <= 0):
        raise TensorforgeError("--tune-budget needs --tuned DB (the database to tune into) and a positive number "
                               "of seconds")
    roofline = get_roofline(measure=False)
    if args.roofline or (measure_roofline and roofline is None):
        print("measuring the machine's peak GEMM GFLOP/s and copy bandwidth ...", file=sys.stderr, flush=True)
        roofline = get_roofline(measure=True)
    cfg = BenchConfig(threads=threads, repeats=args.repeats, warmup=args.warmup, budget_s=args.budget_s,
                      tol=tol, progress=args.progress, batch=args.batch,
                      shapes=parse_shapes(args.shape), seed=args.seed,
                      db=db_option(args.db), fast_math=args.fast_math, precision=args.precision,
                      calibration=args.calibration, calibration_samples=args.calibration_samples,
                      tuned_db=args.tuned, tune_budget_s=args.tune_budget, tune_trials=args.tune_trials)
    result = bench_specs(args.models, cfg, roofline, args.peers)
    print(format_table(result))
    write_json(result, args.json)
    write_chart(result, args.chart)
    print(f"\nwrote {args.json} and {args.chart}")
    bad = [m["model"] for m in result["models"] if not m["check"]["ok"]]
    if bad:
        print(f"tensorforge: output mismatch in {', '.join(bad)}", file=sys.stderr)
        return EXIT_MISMATCH
    return 0


def bench_specs(specs: Sequence[str], cfg: "BenchConfig", roofline: "Roofline | None",
                peers: Sequence[str] | None = None) -> dict:
    """``runner.bench_models`` for every kind of MODEL, JAX functions included; ``peers`` None
    times each model against the peers that can run it (``peers.default_peers``)."""
    from ..benchmark.peers import default_peers
    from ..benchmark.roofline import load_average
    from ..benchmark.runner import apply_threads, bench_model, run_info

    apply_threads(cfg.threads)
    info = run_info(cfg)
    info["jax"] = _installed_version("jax")
    rows = []
    for spec in specs:
        lm = load_bench_model(spec, cfg.batch, cfg.shapes, cfg.seed, cfg.threads)
        chosen = list(peers) if peers is not None else default_peers(lm.kind, cfg.precision)
        rows.append(bench_model(lm, replace(cfg, peers=chosen), roofline))
    info["load_after"] = load_average()
    return {"info": info, "roofline": asdict(roofline) if roofline else None, "models": rows}


def _installed_version(package: str) -> str | None:
    from importlib import metadata
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


# -- JAX functions as MODEL --------------------------------------------------------------------

_FACTORY = re.compile(r"^(?P<path>.+\.py):(?P<name>[A-Za-z_]\w*)$")


class JaxLoadedModel(LoadedModel):
    """A JAX function and its example inputs (``kind`` "jax"): jax.jit is its reference and its
    peer.  ``model`` takes the flat list of ``inputs`` (``load_jax_model`` flattens pytrees)."""

    @property
    def reference_name(self) -> str | None:
        return None if self.reference is None else "jax.jit"

    def import_module(self):
        """The graph module ``tensorforge.compile(fn, example_inputs)`` compiles: the function's
        StableHLO through the StableHLO importer."""
        from ..frontends.stablehlo.jax_bridge import import_jax
        return import_jax(self.model, self.inputs, self.name)[0]

    def compile(self, threads: int | None = None, **options: Any):
        import tensorforge
        return tensorforge.compile(self.model, self.inputs, threads=threads, **options)


def is_jax_spec(spec: str) -> bool:
    """True for a built-in JAX model name or ``FILE.py:FACTORY``."""
    from ..models import jax_models
    return spec in jax_models.names() or _FACTORY.match(spec) is not None


def load_bench_model(spec: str, batch: int | None = None, shapes: dict[str, int] | None = None, seed: int = 0,
                     threads: int | None = None) -> LoadedModel:
    """``loading.load_model`` for zoo, .onnx and .tfm models, ``load_jax_model`` for JAX ones."""
    from .loading import load_model
    if not is_jax_spec(spec):
        return load_model(spec, batch, shapes, seed, threads)
    if shapes:
        raise TensorforgeError(f"--shape: '{spec}' is a JAX function, whose shapes are those of its example "
                               f"inputs (--batch sets a built-in model's batch, or is passed to a factory)")
    return load_jax_model(spec, batch)


def load_jax_model(spec: str, batch: int | None = None) -> JaxLoadedModel:
    """A built-in JAX model (``tensorforge.models.jax_models``) or ``FILE.py:FACTORY``'s
    ``(fn, example_inputs)``, with ``jax.jit(fn)`` as the reference.

    Example inputs may be pytrees (``apply(params, x)`` with a dict of parameters): they are
    flattened here, with jax's dtypes (float64 becomes float32 unless x64 is on), and the model
    is ``fn`` on the flat leaves, which is how every contender and the compiled graph take them."""
    from ..models import jax_models
    match = _FACTORY.match(spec)
    if match is None:
        fn, inputs = jax_models.get(spec, batch)
        name, path = spec, None
    else:
        path = match["path"]
        fn, inputs = _call_factory(spec, _import_file(path), match["name"], batch)
        name = f"{os.path.splitext(os.path.basename(path))[0]}:{match['name']}"
    flat_fn, leaves = _flatten(spec, fn, inputs)
    return JaxLoadedModel(name, "jax", flat_fn, leaves, _jax_reference(flat_fn), path=path,
                          input_names=[f"input{i}" for i in range(len(leaves))])


def _flatten(spec: str, fn: Callable, inputs: Sequence) -> tuple[Callable, list[np.ndarray]]:
    import jax
    leaves, tree = jax.tree_util.tree_flatten(tuple(inputs))
    try:
        arrays = [np.asarray(jax.device_put(x)) for x in leaves]
    except (TypeError, ValueError) as e:
        raise TensorforgeError(f"'{spec}': example inputs must be arrays or pytrees of arrays "
                               f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if tree == jax.tree_util.tree_structure(tuple(arrays)):
        return fn, arrays                            # already flat: keep fn (and its name) as it is

    def flat_fn(*args):
        return fn(*jax.tree_util.tree_unflatten(tree, args))

    flat_fn.__name__ = flat_fn.__qualname__ = getattr(fn, "__name__", "jax_function")
    return flat_fn, arrays


def _import_file(path: str):
    """Runs ``path`` as a module, its folder first on ``sys.path`` as when run as a script."""
    if not os.path.isfile(path):
        raise TensorforgeError(f"cannot load '{path}': no such file")
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    module_spec = importlib.util.spec_from_file_location(f"_tensorforge_bench_{stem}", path)
    module = importlib.util.module_from_spec(module_spec)
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        module_spec.loader.exec_module(module)
    except Exception as e:                  # the user's code: anything can go wrong in it
        raise TensorforgeError(f"cannot import '{path}': {type(e).__name__}: {e}") from None
    finally:
        sys.path.remove(folder)
    return module


def _call_factory(spec: str, module, attr: str, batch: int | None) -> tuple[Callable, Sequence]:
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise TensorforgeError(f"'{spec}': the file defines no function '{attr}'")
    kwargs = {} if batch is None else {"batch": batch}
    usage = (f"'{spec}': {attr} must be a factory that takes {'batch=B' if kwargs else 'no arguments'} "
             f"and returns (fn, example_inputs)")
    try:
        inspect.signature(factory).bind(**kwargs)
    except TypeError:
        raise TensorforgeError(usage) from None
    try:
        made = factory(**kwargs)
    except Exception as e:
        raise TensorforgeError(f"'{spec}' failed: {type(e).__name__}: {e}") from None
    if not (isinstance(made, (tuple, list)) and len(made) == 2 and callable(made[0])
            and isinstance(made[1], (tuple, list))):
        raise TensorforgeError(f"{usage}; it returned a {type(made).__name__}")
    return made[0], made[1]


def _jax_reference(fn: Callable) -> Callable[[Sequence[np.ndarray]], list[np.ndarray]]:
    def reference(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax
        return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(jax.jit(fn)(*arrays))]
    return reference


def register(sub) -> None:
    from .loading import add_model_arguments
    p = sub.add_parser(
        "bench", help="time tensorforge against torch eager, torch.compile, onnxruntime and jax.jit",
        description=textwrap.fill("Compiles each MODEL, checks its outputs against the reference (PyTorch for zoo models, "
                    "onnxruntime for .onnx files, jax.jit for a JAX model: a jax_models name or FILE.py:FACTORY "
                    "returning (fn, example_inputs)), then times tensorforge and every installed peer on the same "
                    "inputs and weights, interleaved, and prints medians, speedups, compile times and "
                    "GFLOP/s. Writes the results as JSON and a PNG chart. Exit status 3 means an output "
                    "mismatch.", 79),
        epilog="examples:\n  tensorforge bench                       # resnet18 and bert_base\n"
               "  tensorforge bench jax_cnn jax_transformer   # JAX models against jax.jit\n"
               "  tensorforge bench my_model.py:make      # make() returns (fn, example_inputs)\n"
               "  tensorforge bench mlp --batch 64 --peers eager,onnxruntime --threads 1\n"
               "  tensorforge bench model.onnx --shape N=1 --roofline\n"
               "  tensorforge bench bert_base --precision int8 --calibration ids.npz\n"
               "  tensorforge bench mlp --precision bf16",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p, nargs="*", default=list(DEFAULT_MODELS))
    add_bench_arguments(p, repeats=10, json_path="tensorforge-bench.json", chart_path="tensorforge-bench.png")
    p.set_defaults(fn=run_bench)
