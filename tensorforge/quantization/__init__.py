"""Post-training quantization: ``tensorforge.quantize(model, calibration_data)``.

The model is imported and optimised (BatchNorm and biases folded, weights constant), every
contraction by constant weights (``graph.matmul``, ``graph.gemm``: linear layers, a transformer's
projections; ``graph.conv`` with one group) is calibrated on the samples (``calibrate.py``) and
rewritten to int8: uint8 activations per tensor with a zero point, int8 weights per output
channel, the exact int32 VNNI kernels (``graph.qmatmul``, ``graph.qconv``), a float rescale
(``rewrite.py``); ``int8-contractions`` then joins the quantize/dequantize arithmetic around each
conv into its kernel.  The result is a graph module that
``tensorforge.compile`` takes like any model.

Mixed precision: everything else (softmax, normalisations, attention's activation products,
other grouped convolutions than depthwise ones) stays float32, and by default so do the first and last
quantizable contractions (``keep_first_last``), whose errors reach the input features and the
logits undiluted; ``exclude`` keeps more by key (``"3:gemm at addmm_3"``), by index or by a
substring of the op's location; the module's ``tf.quantized`` attribute lists what was
quantized.  ``calibration_stats(model, data)`` returns the statistics alone (a ``Calibration``,
which saves to JSON); ``quantize(model, calibration=...)`` reuses them without samples.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..errors import TensorforgeError
from ..ir.builtin import ModuleOp
from .calibrate import METHODS, Calibration, _sample_lists, _samples, calibrate, first_sample
from .rewrite import candidates, dequantize_residuals, is_depthwise, key_of, quantize_contraction


def _excluded(key: str, index: int, exclude: Iterable) -> bool:
    for e in exclude:
        if (isinstance(e, int) and e == index) or (isinstance(e, str) and (e == key or e in key)):
            return True
    return False


def quantize(model: Any, calibration_data: Iterable | None = None, example_inputs: Sequence | None = None,
             method: str = "minmax", per_channel: bool = True, exclude: Iterable = (),
             keep_first_last: bool = True, percentile: float = 99.99, depthwise: bool = True,
             calibration: Calibration | str | None = None, residuals: bool = True,
             max_error: float | None = None) -> ModuleOp:
    """An int8 version of ``model`` (a ``torch.nn.Module``, ONNX model or path, or graph module)
    for ``tensorforge.compile``.  ``calibration_data``: samples of the model's inputs (a list of
    arrays / tensors, or of tuples for several inputs), shaped like ``example_inputs``; or give a
    saved ``calibration`` (a ``Calibration`` or the path of its JSON) instead.  ``method``: minmax,
    percentile (``percentile`` of |x|) or entropy (KL divergence).  ``depthwise``: depthwise
    convolutions int8 too (the int8 depthwise kernel, exact; measured faster than float32 on
    MobileNetV2 with the uint8 tensors around it).  ``residuals``: a residual add of a tensor that int8 convs
    read takes its uint8 form too (quantized like onnxruntime's QDQ residuals: a ResNet block's
    input then moves as uint8; ``False`` keeps it float32, a little more accurate and slower).
    ``max_error``: the accuracy-driven fallback (``quantization/fallback.py``): a fifth of the
    calibration samples is held out, and the layers adding the most error go back to float32
    until the outputs' relative RMS error against float32 on them is at most ``max_error`` (or a
    quarter of the layers are float32); ``tf.fallback`` and ``tf.holdout_error`` on the result
    say which and what was measured."""

    if calibration_data is None and calibration is None:
        raise TensorforgeError("int8 quantization needs calibration data: pass calibration_data= (samples of the "
                               "model's inputs) or calibration= (statistics saved from an earlier quantize)")
    if method not in METHODS:      # also with saved statistics, before the model is imported
        raise TensorforgeError(f"unknown calibration method '{method}' (choose from {', '.join(METHODS)})")
    calibration_data = _listed(calibration_data)
    holdout: list = []
    if max_error is not None:
        samples = _sample_lists(calibration_data) if calibration_data is not None else []
        if len(samples) < 2:
            raise TensorforgeError("max_error needs at least 2 calibration samples: a fifth of them (at least one) "
                                   "is held out to measure the int8 model's error against float32")
        cut = max(1, len(samples) // 5)
        calibration_data, holdout = [tuple(x) for x in samples[:-cut]], samples[-cut:]
    module, ops, keys = _prepared(model, calibration_data, example_inputs)
    if isinstance(calibration, str):
        calibration = Calibration.load(calibration)
    if calibration is None:
        calibration = calibrate(module, calibration_data, keys, method, percentile)
    options = dict(per_channel=per_channel, exclude=tuple(exclude), keep_first_last=keep_first_last,
                   depthwise=depthwise, residuals=residuals)
    if max_error is None:
        return _quantized(module, ops, keys, calibration, **options)
    return _with_fallback(module, calibration, _samples(holdout, len(module.main.args)), float(max_error), options)


def _chosen(ops, keys, calibration: Calibration, exclude: tuple, keep_first_last: bool, depthwise: bool,
            promoted: tuple = ()) -> list:
    """(op, activation range) of the contractions to quantize."""
    chosen = []
    for i, op in enumerate(ops):
        key = keys[id(op)]
        if keep_first_last and i in (0, len(ops) - 1) and len(ops) > 2:
            continue
        if key in promoted or _excluded(key, i, exclude) or (op.name == "graph.conv" and is_depthwise(op) and not depthwise):
            continue
        if key not in calibration.ranges:
            raise TensorforgeError(f"the calibration statistics have no range for '{key}': they were made for "
                                   "another model (or pipeline); calibrate this one")
        chosen.append((op, calibration.ranges[key]))
    return chosen


def _rewritten(ops, keys, calibration: Calibration, per_channel: bool, exclude: tuple, keep_first_last: bool,
               depthwise: bool, residuals: bool, promoted: tuple = ()) -> list:
    """Quantizes the chosen contractions in place (before the graph optimiser); their keys and
    ``quantize_contraction`` records."""
    chosen = _chosen(ops, keys, calibration, exclude, keep_first_last, depthwise, promoted)
    if chosen:
        _warn_without_vnni()
    quantized = [(keys[id(op)], quantize_contraction(op, lo, hi, per_channel)) for op, (lo, hi) in chosen]
    if residuals:
        dequantize_residuals([record for _, record in quantized])
    return quantized


def _quantized(module: ModuleOp, ops, keys, calibration: Calibration, **options) -> ModuleOp:
    return _optimized(module, _rewritten(ops, keys, calibration, **options))


def _optimized(module: ModuleOp, quantized: list) -> ModuleOp:
    """``module`` after ``_rewritten`` through the graph pipeline (which joins the int8 kernels'
    epilogues), with the quantized keys in ``tf.quantized``."""
    from ..passes.pipeline import optimize
    optimize(module, "cpu", None)
    module.attributes["tf.quantized"] = tuple(key for key, _ in quantized)
    return module


def _with_fallback(base: ModuleOp, calibration: Calibration, holdout: list, max_error: float, options: dict) -> ModuleOp:
    """``quantize`` with ``max_error`` (``fallback.py``): the float32 model probed once on the
    held-out samples, then quantized with more layers promoted until its error is small enough."""
    from .fallback import Probe, added_errors, search

    base_ops = candidates(base)
    base_keys = [key_of(op, i) for i, op in enumerate(base_ops)]
    wanted: dict[int, list[str]] = {}
    for op, key in zip(base_ops, base_keys):
        wanted.setdefault(id(op.operands[0]), []).append(f"x:{key}")
        wanted.setdefault(id(op.results[0]), []).append(f"y:{key}")
    reference = Probe.run(base.main, holdout, wanted)

    def once(promoted: tuple):
        module = base.clone()
        ops = candidates(module)
        keys = {id(op): key_of(op, i) for i, op in enumerate(ops)}
        quantized = _rewritten(ops, keys, calibration, promoted=promoted, **options)
        names: dict[int, list[str]] = {}
        for key, (x, _, _, _, y) in quantized:
            names.setdefault(id(x), []).append(f"x:{key}")
            names.setdefault(id(y), []).append(f"y:{key}")
        probe = Probe.run(module.main, holdout, names)
        error = probe.output_error(reference)
        added = added_errors([key for key, _ in quantized], probe, reference)
        return _optimized(module, quantized), error, added

    module, promoted, first, final = search(once, len(base_ops), max_error)
    module.attributes["tf.fallback"] = promoted
    module.attributes["tf.holdout_error"] = (first, final)
    return module


def _warn_without_vnni() -> None:
    """The stated fallback on a CPU without VNNI: the same exact int8 results from a portable loop."""
    import warnings

    from ..codegen.c import qgemm
    from ..codegen.target import Target
    from ..errors import TensorforgeWarning
    if qgemm.isa(Target.host()) == qgemm.SCALAR:
        warnings.warn("this CPU has neither AVX512-VNNI nor AVX-VNNI: the int8 kernels run a portable C loop "
                      "(the same exact results, usually slower than float32); compile without precision='int8' "
                      "for speed", TensorforgeWarning, stacklevel=3)


def calibration_stats(model: Any, calibration_data: Iterable, example_inputs: Sequence | None = None,
                      method: str = "minmax", percentile: float = 99.99) -> Calibration:
    """The activation ranges ``quantize`` would use, to save (``.save(path)``) and pass again."""
    calibration_data = _listed(calibration_data)
    module, _, keys = _prepared(model, calibration_data, example_inputs)
    return calibrate(module, calibration_data, keys, method, percentile)


def _listed(data):
    """Calibration data that can be walked twice (a generator is read once, here)."""
    if data is None or hasattr(data, "shape") or isinstance(data, (list, tuple, dict)):
        return data
    return list(data)


def optimized_module(model: Any, example_inputs: Sequence | None) -> ModuleOp:
    """``model`` imported (a graph module is copied, not changed) and through the default graph
    pipeline: BatchNorm and biases folded, weights constant, as the low-precision rewrites want it."""
    from ..api import import_model
    from ..passes.pipeline import default_pipeline_text, optimize

    module = import_model(model, example_inputs)
    if isinstance(model, ModuleOp):
        module = module.clone()
    # plain layout: the low-precision rewrites take graph.conv, not the blocked float32 convolutions
    optimize(module, "cpu", default_pipeline_text("cpu", layout=False))
    return module


def _prepared(model: Any, calibration_data: Iterable | None, example_inputs: Sequence | None):
    """(optimised module, its quantizable contractions, their keys by ``id``); without example
    inputs, the first calibration sample stands for them."""
    if example_inputs is None and calibration_data is not None and not isinstance(model, (ModuleOp, str)):
        example_inputs = first_sample(calibration_data)
    module = optimized_module(model, example_inputs)
    ops = candidates(module)
    return module, ops, {id(op): key_of(op, i) for i, op in enumerate(ops)}


__all__ = ["Calibration", "METHODS", "calibrate", "calibration_stats", "optimized_module", "quantize"]
