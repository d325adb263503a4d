"""Low-precision accuracy on real data without downloads: scikit-learn's 8x8 digits.

Shared by ``benchmarks/int8_accuracy.py`` (several seeds, a table) and
``tests/quantization/test_accuracy_digits.py`` (one cheap seed, the issue's targets), so that the
numbers the test asserts are the numbers the benchmark prints.

Why this shape of experiment:

* The data ships inside scikit-learn (``load_digits``), so nothing is downloaded and every run
  sees the same images.
* Train, calibration and test splits are disjoint and stratified (fixed by the seed): calibrating
  on test images would flatter int8, and an unstratified small test split would move top-1 by
  whole points from one seed to the next.
* Two small models trained in seconds on the CPU with ``torch.manual_seed``: a CNN (convolutions,
  pooling, linear layers) and an MLP (linear layers only), so the comparison holds whichever ops
  tensorforge's int8 path quantizes at the time.
* The reference is the torch model's float32 logits.  Besides top-1 (which a 10-class problem with
  a few hundred test images resolves to ~0.2 points), prediction agreement with float32 and the
  logit SQNR measure the quantization error itself, which top-1 hides while it is small.
* onnxruntime's static QDQ quantization (per-channel int8 weights, uint8 activations, MinMax
  calibration on the same calibration batches) is the baseline an int8 user would otherwise reach
  for.

torch, scikit-learn and onnxruntime are imported inside the functions: tensorforge does not
depend on them.
"""
from __future__ import annotations

import functools
import importlib.util
import io
import logging
import math
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

MODELS = ("cnn", "mlp")
BATCH = 50          # the compiled batch size; calibration batches and evaluation chunks have it
N_CAL, N_TEST = 200, 500


@dataclass
class Splits:
    """Images (flat, standardised with the training split's statistics) and labels per split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_cal: np.ndarray
    y_cal: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def load_splits(seed: int, n_cal: int = N_CAL, n_test: int = N_TEST) -> Splits:
    """Disjoint stratified splits of the 1797 digits; the rest trains."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    x_rest, x_test, y_rest, y_test = train_test_split(x, y, test_size=n_test, stratify=y, random_state=seed)
    x_train, x_cal, y_train, y_cal = train_test_split(x_rest, y_rest, test_size=n_cal, stratify=y_rest,
                                                      random_state=seed)
    # statistics of the training split only: the calibration and test images stay unseen
    mean, std = float(x_train.mean()), float(x_train.std())
    norm = [((a - mean) / std).astype(np.float32) for a in (x_train, x_cal, x_test)]
    return Splits(norm[0], y_train, norm[1], y_cal, norm[2], y_test)


def as_input(kind: str, x: np.ndarray) -> np.ndarray:
    """Flat images shaped as ``kind``'s input: (N, 1, 8, 8) for the CNN, (N, 64) for the MLP."""
    return np.ascontiguousarray(x.reshape(-1, 1, 8, 8) if kind == "cnn" else x.reshape(-1, 64))


def build_model(kind: str) -> Any:
    """An untrained ``torch.nn.Module`` of ``kind`` (``cnn`` or ``mlp``), 10 logits out."""
    import torch.nn as nn

    if kind == "cnn":
        return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 3 * 3, 64), nn.ReLU(),
                             nn.Linear(64, 10))
    if kind == "mlp":
        return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    raise ValueError(f"unknown model kind '{kind}' (choose from {', '.join(MODELS)})")


def train(kind: str, splits: Splits, seed: int, epochs: int = 20, batch: int = 64, lr: float = 3e-3) -> Any:
    """``build_model(kind)`` trained with Adam on small shuffled batches, in eval mode.

    The seed fixes the initial weights and the batch order, and one torch thread the order of
    the sums, so a run repeats exactly whatever the core count; one thread is also the faster
    for layers this small (threads only contend, worse on a busy machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(seed)
        model = build_model(kind)
        opt = torch.optim.Adam(model.parameters(), lr=lr)
        x = torch.from_numpy(as_input(kind, splits.x_train))
        y = torch.from_numpy(splits.y_train)
        gen = torch.Generator().manual_seed(seed)
        model.train()
        for _ in range(epochs):
            order = torch.randperm(len(x), generator=gen)
            for i in range(0, len(x), batch):
                idx = order[i:i + batch]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def calibration_batches(kind: str, splits: Splits, batch: int = BATCH) -> list[np.ndarray]:
    """The calibration split in batches of the compiled size; tensorforge and onnxruntime both
    calibrate on exactly these."""
    x = as_input(kind, splits.x_cal)
    return [x[i:i + batch] for i in range(0, len(x) - batch + 1, batch)]


def run_batched(fn: Callable[[np.ndarray], Any], x: np.ndarray, batch: int = BATCH) -> np.ndarray:
    """``fn`` (compiled for ``batch`` rows) over all of ``x``; the last chunk is zero-padded and
    the padding's rows dropped."""
    out = []
    for i in range(0, len(x), batch):
        chunk = x[i:i + batch]
        n = len(chunk)
        if n < batch:
            chunk = np.concatenate([chunk, np.zeros((batch - n,) + chunk.shape[1:], chunk.dtype)])
        out.append(np.asarray(fn(chunk))[:n])
    return np.concatenate(out)


def top1(logits: np.ndarray, labels: np.ndarray) -> float:
    """Top-1 accuracy in percent."""
    return 100.0 * float((logits.argmax(1) == labels).mean())


def agreement(logits: np.ndarray, reference: np.ndarray) -> float:
    """Percent of rows whose predicted class is the reference's."""
    return 100.0 * float((logits.argmax(1) == reference.argmax(1)).mean())


def sqnr_db(logits: np.ndarray, reference: np.ndarray) -> float:
    """Signal to quantization-noise ratio of the logits, dB (``inf`` when they are identical)."""
    ref = reference.astype(np.float64)
    noise = float(((logits.astype(np.float64) - ref) ** 2).sum())
    return math.inf if noise == 0.0 else 10.0 * math.log10(float((ref ** 2).sum()) / noise)


def export_onnx(model: Any, kind: str, batch: int = BATCH) -> bytes:
    """``model`` as ONNX with a symbolic batch dimension.  The TorchScript exporter
    (``dynamo=False``): the dynamo exporter needs onnxscript, which is not a dependency."""
    import torch

    x = torch.from_numpy(as_input(kind, np.zeros((batch, 64), np.float32)))
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], output_names=["logits"],
                          dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})
    return buf.getvalue()


def onnxruntime_int8(onnx_model: bytes, calibration: list[np.ndarray]) -> Any:
    """An onnxruntime session of ``onnx_model`` quantized by ``quantize_static``: QDQ,
    per-channel int8 weights, uint8 activations, MinMax ranges from ``calibration``."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter(calibration)

        def get_next(self):
            x = next(self._it, None)
            return None if x is None else {"x": x}

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "f32.onnx"), os.path.join(d, "int8.onnx")
        with open(src, "wb") as f:
            f.write(onnx_model)
        muted = logging.root.manager.disable       # quantize_static logs advice on the root logger
        logging.disable(logging.WARNING)
        try:
            quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        finally:
            logging.disable(muted)
        with open(dst, "rb") as f:
            quantized = f.read()
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(quantized, so, providers=["CPUExecutionProvider"])


def has_onnxruntime() -> bool:
    """Whether the onnxruntime baseline (and the ONNX exporter's ``onnx``) can run."""
    return all(importlib.util.find_spec(name) is not None for name in ("onnx", "onnxruntime"))


@dataclass
class Result:
    """One model and seed: test logits per contender (``torch-f32`` is the reference), the labels,
    which contractions tensorforge's int8 rewrite took (``tf.quantized``), and the contenders that
    raised (``evaluate(strict=False)``) with their errors."""

    kind: str
    seed: int
    labels: np.ndarray
    logits: dict[str, np.ndarray] = field(default_factory=dict)
    quantized: dict[str, list[str]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def metrics(self, name: str) -> dict[str, float]:
        """top1 (%), agree (% of predictions equal to torch-f32's) and sqnr_db for ``name``."""
        ref, q = self.logits["torch-f32"], self.logits[name]
        return {"top1": top1(q, self.labels), "agree": agreement(q, ref), "sqnr_db": sqnr_db(q, ref)}


def evaluate(kind: str, seed: int, epochs: int = 20, bf16: bool | None = None, ort: bool | None = None,
             n_cal: int = N_CAL, n_test: int = N_TEST, strict: bool = True) -> Result:
    """Trains ``kind`` with ``seed`` and runs the test split through every contender:
    ``torch-f32``, ``tf-f32``, ``tf-int8`` (``tensorforge.quantize`` defaults: the first and last
    contractions stay float32), ``tf-int8-all`` (``keep_first_last=False``: every contraction
    int8, as onnxruntime quantizes), ``tf-bf16`` and ``ort-int8``.  ``bf16`` / ``ort``: include
    those (default: when the CPU / the packages allow).  ``strict=False`` records a contender's
    exception in ``Result.failed`` and goes on (a benchmark still reports the others)."""
    import torch

    import tensorforge
    from tensorforge.quantization import bf16 as bf16_support

    if bf16 is None:
        bf16 = bf16_support.supported()
    if ort is None:
        ort = has_onnxruntime()
    splits = load_splits(seed, n_cal, n_test)
    model = train(kind, splits, seed, epochs)
    x_test = as_input(kind, splits.x_test)
    cal = calibration_batches(kind, splits)
    example = (torch.from_numpy(cal[0]),)
    result = Result(kind, seed, splits.y_test)
    with torch.no_grad():
        result.logits["torch-f32"] = model(torch.from_numpy(x_test)).numpy()
    # one torch.export for every contender (compile and quantize copy a graph module, never change it)
    graph = tensorforge.import_model(model, example)
    tf_compile = functools.partial(tensorforge.compile, threads=1)     # as onnxruntime: no contention, any machine

    def tf_int8(keep_first_last: bool) -> np.ndarray:
        # quantize, then compile: the same as compile(precision="int8", calibration=cal), and the
        # module says which contractions went int8
        q = tensorforge.quantize(graph, cal, keep_first_last=keep_first_last)
        result.quantized["tf-int8" if keep_first_last else "tf-int8-all"] = list(q.attributes.get("tf.quantized", []))
        return run_batched(tf_compile(q), x_test)

    contenders: dict[str, Callable[[], np.ndarray]] = {
        "tf-f32": lambda: run_batched(tf_compile(graph), x_test),
        "tf-int8": lambda: tf_int8(True),
        "tf-int8-all": lambda: tf_int8(False),
    }
    if bf16:
        contenders["tf-bf16"] = lambda: run_batched(tf_compile(graph, precision="bf16"), x_test)
    if ort:
        contenders["ort-int8"] = lambda: onnxruntime_int8(export_onnx(model, kind), cal).run(None, {"x": x_test})[0]
    for name, run in contenders.items():
        try:
            result.logits[name] = np.asarray(run())
        except Exception as e:      # noqa: BLE001 - a benchmark reports the failure and the other contenders
            if strict:
                raise
            result.failed[name] = f"{type(e).__name__}: {e}"
    return result


__all__ = ["BATCH", "MODELS", "N_CAL", "N_TEST", "Result", "Splits", "agreement", "as_input", "build_model",
           "calibration_batches", "evaluate", "export_onnx", "has_onnxruntime", "load_splits", "onnxruntime_int8",
           "run_batched", "sqnr_db", "top1", "train"]
