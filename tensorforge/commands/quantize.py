"""`tensorforge quantize MODEL --calibration DATA.npz -o OUT`: post-training int8 from the command line.

The model goes through ``tensorforge.quantize`` (calibrated on the samples, or on statistics saved
by an earlier ``--save-calibration``) and comes out as a compiled ``.tfm`` file, or as the int8
graph in textual IR (``.mlir``, what ``tensorforge.ir.save_module`` writes) to inspect or compile
later.  There is no exporter from tensorforge's graph to ONNX, so ``-o x.onnx`` is refused.

Calibration data (``read_calibration``, shared with ``bench --precision int8``): one array per
model input in an ``.npz`` (keyed by the input's name, the zoo's ``input0``.. or ``np.savez``'s
``arr_0``..), or one ``.npy`` for a one-input model.  Axis 0 runs over samples, spelled either
way: the input's shape with a sample axis in front (``[S, 1, 784]`` for an input ``[1, 784]``), or
the input's own rank with its batch axis holding ``S x batch`` rows (``[S, 784]``: S samples of
batch 1).  Both are unambiguous because their ranks differ.

Exit codes: 0 written, 1 a tensorforge error (bad calibration data, unknown model), 2 bad usage.
"""
from __future__ import annotations

import argparse
import os
import textwrap
import time
import zipfile
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import TensorforgeError

if TYPE_CHECKING:
    from ..ir.builtin import ModuleOp
    from .loading import LoadedModel

OUTPUTS = (".tfm", ".mlir")
SAMPLE_SEED = 100          # first input_seed of drawn calibration samples (the example inputs use others)

Sample = tuple  # one calibration sample: an array per model input, in input order


# -- calibration data --------------------------------------------------------------------------

def read_calibration(path: str, lm: "LoadedModel", module: "ModuleOp | None" = None) -> list[Sample]:
    """The samples in ``path`` (see the module docstring), shaped and typed like ``lm``'s example
    inputs.  ``module`` (the imported graph) adds its argument names as accepted keys, so a zoo
    model's ``x`` works as well as ``input0``.  Every mismatch names the input it is about."""
    arrays = _load_arrays(path)
    names = _input_aliases(lm, module)
    by_input = _match_keys(path, arrays, names)
    per_input = [_split_samples(path, names[i][0], arrays[key], example)
                 for i, (key, example) in enumerate(zip(by_input, lm.inputs))]
    counts = {len(s) for s in per_input}
    if len(counts) > 1:
        listed = ", ".join(f"'{names[i][0]}' {len(s)}" for i, s in enumerate(per_input))
        raise TensorforgeError(f"--calibration {path}: the inputs have different numbers of samples ({listed})")
    if not per_input or not per_input[0]:
        raise TensorforgeError(f"--calibration {path}: no samples (axis 0 of every array runs over samples)")
    return list(zip(*per_input))


def draw_samples(lm: "LoadedModel", n: int, batch: int | None = None) -> list[Sample]:
    """``n`` calibration samples when the user has none: the zoo's own input generator with other
    seeds (token ids stay token ids), or for ONNX models random inputs of the declared types."""
    if n < 1:
        raise TensorforgeError("--calibration-samples must be at least 1")
    if lm.kind == "zoo":
        from .. import models
        return [tuple(t.numpy() for t in models.get(lm.name, batch, input_seed=SAMPLE_SEED + i)[1])
                for i in range(n)]
    from .loading import random_inputs
    specs = [(x.shape, x.dtype) for x in lm.inputs]
    return [tuple(random_inputs(specs, seed=SAMPLE_SEED + i)) for i in range(n)]


def _load_arrays(path: str) -> dict[str, np.ndarray]:
    if not os.path.isfile(path):
        raise TensorforgeError(f"--calibration {path}: no such file")
    try:
        data = np.load(path, allow_pickle=False)
        if isinstance(data, np.ndarray):               # a .npy: the one input's samples
            return {"arr_0": data}
        with data:
            return {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise TensorforgeError(f"--calibration {path}: not a NumPy .npz/.npy file ({e})") from None


def _input_aliases(lm: "LoadedModel", module: "ModuleOp | None") -> list[list[str]]:
    """The keys each input may have, its display name first."""
    hints = [a.name_hint for a in module.main.args] if module is not None else []
    out = []
    for i, _ in enumerate(lm.inputs):
        names = [hints[i]] if i < len(hints) and hints[i] else []
        names += [lm.input_names[i]] if i < len(lm.input_names) else []
        out.append(list(dict.fromkeys(names + [f"arr_{i}"])))
    return out


def _match_keys(path: str, arrays: dict, names: list[list[str]]) -> list[str]:
    chosen, used = [], set()
    for aliases in names:
        present = [n for n in aliases if n in arrays]
        if not present:
            raise TensorforgeError(f"--calibration {path} has no array for input '{aliases[0]}' "
                                   f"(it has {', '.join(arrays) or 'none'}); name it {' or '.join(aliases)}")
        if len(present) > 1:
            raise TensorforgeError(f"--calibration {path} has two arrays for input '{aliases[0]}': "
                                   f"{' and '.join(present)}; keep one")
        chosen.append(present[0])
        used.add(present[0])
    extra = [k for k in arrays if k not in used]
    if extra:
        wanted = ", ".join(a[0] for a in names)
        raise TensorforgeError(f"--calibration {path}: array '{extra[0]}' is not an input of the model "
                               f"(its inputs: {wanted})")
    return chosen


def _split_samples(path: str, name: str, a: np.ndarray, example: np.ndarray) -> list[np.ndarray]:
    want = example.shape
    if a.ndim == len(want) + 1 and a.shape[1:] == want:
        samples = list(a)
    elif a.ndim == len(want) >= 1 and a.shape[1:] == want[1:] and want[0] and a.shape[0] % want[0] == 0:
        samples = [a[j:j + want[0]] for j in range(0, a.shape[0], want[0])]
    else:
        rows = f"[{'S' if want[0] == 1 else f'S*{want[0]}'}, {', '.join(map(str, want[1:]))}]" if want else "[S]"
        raise TensorforgeError(f"--calibration {path}: the data for input '{name}' has shape {list(a.shape)}; "
                               f"the model takes {list(want)}, so give [S, {', '.join(map(str, want))}] or {rows} "
                               f"for S samples")
    if a.dtype != example.dtype:
        if not np.can_cast(a.dtype, example.dtype, "same_kind"):
            raise TensorforgeError(f"--calibration {path}: the data for input '{name}' is {a.dtype}; "
                                   f"the model takes {example.dtype}")
        samples = [s.astype(example.dtype) for s in samples]
    return [np.ascontiguousarray(s) for s in samples]


# -- the command -------------------------------------------------------------------------------

def _check_output(path: str) -> str:
    """The output's kind, refused before any work when it cannot be written."""
    ext = os.path.splitext(path)[1].lower()
    if ext == ".onnx":
        raise TensorforgeError(f"-o {path}: tensorforge has no exporter from its graph to ONNX; write "
                               f"{os.path.splitext(path)[0]}.tfm (a compiled model that `tensorforge run` and "
                               f"tensorforge.load run) or .mlir (the int8 graph as text)")
    if ext not in OUTPUTS:
        raise TensorforgeError(f"-o {path}: the output must end in .tfm (compiled) or .mlir (the int8 graph "
                               f"as text)")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise TensorforgeError(f"-o {path}: the directory {folder} does not exist")
    return ext


def _exclude_items(items: Sequence[str], keys: Sequence[str]) -> list:
    """``--exclude`` values as ``quantize`` takes them (digits: an index), each checked against
    the model's keys: a typo would otherwise quietly quantize the layer it meant to keep."""
    from ..quantization import _excluded
    out: list = []
    for item in items:
        value = int(item) if item.isdigit() else item
        if not any(_excluded(k, i, [value]) for i, k in enumerate(keys)):
            raise TensorforgeError(f"--exclude {item} matches no quantizable layer; the layers are: "
                                   f"{'; '.join(keys) or 'none'}")
        out.append(value)
    return out


def _statistics(args: argparse.Namespace, module, samples):
    """The calibration to quantize with: loaded from --calibration-stats, or computed on the samples."""
    from ..progress import Progress
    from ..quantization import Calibration, calibration_stats
    if args.calibration_stats:
        stats = Calibration.load(args.calibration_stats)
        if args.method and args.method != stats.method:
            raise TensorforgeError(f"--method {args.method}: the statistics in {args.calibration_stats} were "
                                   f"made with {stats.method}; the method applies when calibrating")
        return stats
    with Progress(f"calibrating on {len(samples)} sample(s)", total=None):
        stats = calibration_stats(module, samples, method=args.method or "minmax")
    if args.save_calibration:
        try:
            stats.save(args.save_calibration)
        except OSError as e:
            raise TensorforgeError(f"--save-calibration {args.save_calibration}: {e.strerror}") from None
        print(f"calibration statistics -> {args.save_calibration}")
    return stats


def _print_layers(keys: Sequence[str], quantized: Sequence[str], stats, per_channel: bool) -> None:
    chosen = set(quantized)
    print(f"quantized {len(quantized)} of {len(keys)} layer(s) to int8 ({stats.method} calibration on "
          f"{stats.samples} sample(s), {'per-channel' if per_channel else 'per-tensor'} weights, "
          f"uint8 activations):")
    for k in keys:
        print(f"  {'int8' if k in chosen else 'float32':<8} {k}")
    if not keys:
        print("  nothing to quantize: no layer that tensorforge.quantize takes (contractions by constant weights)")
    elif len(quantized) < len(keys):
        print("  (float32: the first and last layer unless --quantize-first-last, and --exclude)")


def _write(ext: str, args: argparse.Namespace, lm, module) -> None:
    from ..benchmark.stats import max_abs_diff_all, max_rel_err_all, top1_agreement
    from ..ir.parser import save_module
    from ..passes.fusion.cost import fmt_bytes
    if ext == ".mlir":
        save_module(module, args.output)
        sidecar = args.output + ".npz"
        extra = f" + {sidecar} ({fmt_bytes(os.path.getsize(sidecar))}, the large constants)" \
            if os.path.exists(sidecar) else ""
        print(f"wrote {args.output} ({fmt_bytes(os.path.getsize(args.output))}){extra}; compile it with "
              f"tensorforge.compile(tensorforge.ir.load_module('{args.output}'))")
        return
    import tensorforge
    from ..progress import Progress
    from .loading import db_option
    t0 = time.perf_counter()
    with Progress(f"compiling int8 {lm.name}", total=None):
        cm = tensorforge.compile(module, threads=args.threads, db=db_option(args.db))
    compile_s = time.perf_counter() - t0
    if lm.reference is not None:
        outs, refs = cm.run(*lm.inputs), lm.reference(lm.inputs)
        top1 = top1_agreement(outs, refs)
        print(f"int8 against float32 {lm.reference_name} on the example inputs: max |diff| "
              f"{max_abs_diff_all(outs, refs):.2e}, max relative error {max_rel_err_all(outs, refs):.2e}"
              + ("" if top1 is None else f", top-1 agreement {100 * top1:.0f}%"))
    cm.save(args.output)
    print(f"compiled in {compile_s:.1f} s -> {args.output} ({fmt_bytes(os.path.getsize(args.output))}); "
          f"run it with `tensorforge run {args.output}` or tensorforge.load")


def _cmd_quantize(args: argparse.Namespace) -> int:
    from ..passes.fusion.cost import fmt_bytes
    from ..passes.pipeline import ModuleStats
    from ..quantization import optimized_module, quantize
    from .loading import load_model, model_kind, parse_shapes

    ext = _check_output(args.output)
    if model_kind(args.model) == "tfm":
        raise TensorforgeError(f"'{args.model}' is already compiled; quantize the zoo model or .onnx file "
                               f"it was compiled from")
    if not args.calibration and not args.calibration_stats:
        raise TensorforgeError("quantize needs calibration data: --calibration DATA.npz (samples of the model's "
                               "inputs) or --calibration-stats stats.json (saved by --save-calibration)")
    if args.calibration and args.calibration_stats:
        raise TensorforgeError("give --calibration (samples) or --calibration-stats (saved statistics), not both")
    if args.max_error is not None and not args.calibration:
        raise TensorforgeError("--max-error needs --calibration samples: a fifth of them is held out to measure "
                               "the error")
    if args.save_calibration and not args.calibration:
        raise TensorforgeError("--save-calibration needs --calibration: the statistics are computed from samples")
    lm = load_model(args.model, args.batch, parse_shapes(args.shape), seed=args.seed, threads=args.threads)
    graph = lm.import_module()
    samples = read_calibration(args.calibration, lm, graph) if args.calibration else None
    f32 = optimized_module(graph, None)            # once: calibration and the rewrite start from it
    stats = _statistics(args, f32, samples)
    keys = list(stats.ranges)                       # every layer quantize can take, in its own spelling
    options = dict(method=stats.method, per_channel=not args.per_tensor, exclude=_exclude_items(args.exclude, keys),
                   keep_first_last=not args.quantize_first_last)
    if args.max_error is not None:          # calibrates on 4/5 of the samples, measures on the rest
        module = quantize(f32, samples, max_error=args.max_error, **options)
        first, final = module.attributes["tf.holdout_error"]
        promoted = module.attributes["tf.fallback"]
        print(f"held-out error (relative RMS vs float32): {first:.4g} all int8 -> {final:.4g} with "
              f"{len(promoted)} layer(s) back to float32{': ' + ', '.join(promoted) if promoted else ''}")
    else:
        module = quantize(f32, calibration=stats, **options)
    quantized = list(module.attributes.get("tf.quantized", ()))
    _print_layers(keys, quantized, stats, not args.per_tensor)
    print(f"weights: {fmt_bytes(ModuleStats.of(f32).weight_bytes)} float32 -> "
          f"{fmt_bytes(ModuleStats.of(module).weight_bytes)} with int8 layers")
    _write(ext, args, lm, module)
    return 0


def register(sub) -> None:
    from ..quantization import METHODS
    from .loading import add_db_argument, add_model_arguments
    p = sub.add_parser(
        "quantize", help="post-training int8: calibrate on sample inputs, write a compiled .tfm (or the int8 graph)",
        description=textwrap.fill(
            "Quantizes MODEL's layers (contractions by constant weights, as tensorforge.quantize takes them) to "
            "int8: uint8 activations with ranges calibrated on the samples in DATA.npz, int8 weights, the VNNI "
            "kernel. Everything else stays float32, and so do the first and last such layer unless "
            "--quantize-first-last. "
            "DATA.npz holds one array per model input (keyed by its name, input0.. or arr_0..), axis 0 over "
            "samples: [S, *input shape], or the input's own rank with S*batch rows. OUT.tfm is compiled "
            "(tensorforge run / tensorforge.load); OUT.mlir is the int8 graph as text.", 79),
        epilog="examples:\n  tensorforge quantize mlp --calibration samples.npz -o mlp-int8.tfm\n"
               "  tensorforge quantize bert_base --calibration ids.npz --method percentile "
               "--save-calibration bert.json -o bert.tfm\n"
               "  tensorforge quantize bert_base --calibration-stats bert.json --exclude 5 -o bert.tfm\n"
               "  tensorforge quantize model.onnx --shape N=1 --calibration data.npz -o model-int8.mlir",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.tfm (compiled) or OUT.mlir (int8 graph)")
    p.add_argument("--calibration", metavar="DATA.npz", help="samples of the model's inputs (see above)")
    p.add_argument("--calibration-stats", metavar="STATS.json",
                   help="reuse statistics saved by --save-calibration instead of samples")
    p.add_argument("--save-calibration", metavar="STATS.json", help="save the calibration statistics for reuse")
    p.add_argument("--method", choices=METHODS, default=None,
                   help="how activation ranges are chosen from the samples (default minmax)")
    p.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor (default: per channel)")
    p.add_argument("--max-error", type=float, default=None, metavar="E",
                   help="accuracy-driven fallback: hold out a fifth of the samples and put the layers adding the most "
                        "error back to float32 until the outputs' relative RMS error is at most E")
    p.add_argument("--exclude", nargs="+", action="extend", default=[], metavar="KEY",
                   help="keep these layers float32: a key as printed ('3:gemm at addmm_3'), its index, or a "
                        "substring of it")
    p.add_argument("--quantize-first-last", action="store_true",
                   help="also quantize the first and last layer (kept float32 by default: their error "
                        "reaches the inputs' features and the outputs undiluted)")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="threads for the output check")
    add_db_argument(p)
    p.set_defaults(fn=_cmd_quantize)
