"""The peers ``tensorforge bench`` times: torch eager, torch.compile (Inductor, with and without
freezing), onnxruntime and jax.jit (XLA on the CPU), each set up on the same inputs and weights as
tensorforge.

A peer that is not installed, does not apply to the model (torch peers need a torch model) or
fails to set up is skipped with a one-line reason instead of stopping the benchmark: the point
is a comparison against whatever the user has.  Zoo models reach onnxruntime through
``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``), which needs neither
network nor onnxscript.

``bench --precision int8`` gives onnxruntime the same model quantized by its own post-training
tool (``quantize_static``: QDQ, per-channel int8 weights, uint8 activations) on the same
calibration samples tensorforge calibrates on; ``--precision bf16`` times onnxruntime in float32,
as it has no bf16 path on CPUs.  Torch peers stay float32 either way.

A JAX model (``tensorforge.models.jax_models`` or a user's factory, see ``commands/bench.py``)
has the jax.jit peer alone: there is no torch module or ONNX file behind it.  XLA sizes its CPU
thread pool when JAX starts, so ``threads`` does not reach it; below the core count the
contender's note says so.
"""
from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..commands.loading import LoadedModel, onnxruntime_session, torch_outputs

PEERS = ("eager", "inductor", "inductor-freezing", "onnxruntime", "jax")
LABELS = {"tensorforge": "tensorforge", "tensorforge-tuned": "tensorforge tuned", "eager": "torch eager", "inductor": "torch.compile",
          "inductor-freezing": "torch.compile+freezing", "onnxruntime": "onnxruntime", "jax": "jax.jit"}


class PeerUnavailable(Exception):
    """A peer that cannot run this model here; the message says why (shown as a note)."""


@dataclass
class Contender:
    """One implementation of the model: ``run`` is one inference on the bench inputs."""

    key: str
    run: Callable[[], Any]
    outputs: list[np.ndarray]        # from the first call, for the output check
    setup_s: float                   # compile / export / session creation, including the first call
    precision: str | None = None     # shown after the label when the bench compares precisions
    note: str = ""                   # what a reader must know to compare it (e.g. how it was quantized)

    @property
    def label(self) -> str:
        name = LABELS.get(self.key, self.key)
        return f"{name} {self.precision}" if self.precision else name


def default_peers(kind: str, precision: str = "f32") -> list[str]:
    """The peers a bench without ``--peers`` times for a model of ``kind`` ("zoo", "onnx", "tfm"
    or "jax"): only those that can run it, so that a table is not padded with skip notes."""
    if kind == "jax":
        return ["jax"]
    return ["onnxruntime"] if precision != "f32" else [p for p in PEERS if p != "jax"]


def make_peer(key: str, lm: LoadedModel, threads: int, precision: str = "f32",
              samples: Sequence[tuple] | None = None) -> Contender:
    """Sets up peer ``key`` (one of ``PEERS``) for ``lm``; raises ``PeerUnavailable`` with a reason.
    ``precision`` is the one tensorforge is benched at; int8 needs the calibration ``samples``."""
    if key not in PEERS:
        raise PeerUnavailable(f"unknown peer '{key}' (known: {', '.join(PEERS)})")
    if key == "onnxruntime":
        return _onnxruntime(lm, threads, precision, samples)
    peer = _jax_peer(lm, threads) if key == "jax" else _torch_peer(key, lm)
    if precision != "f32":
        peer.precision = "f32"
    return peer


def _what(lm: LoadedModel) -> str:
    """What kind of model ``lm`` is, for a skip reason."""
    return {"zoo": "a PyTorch zoo model", "onnx": "an .onnx file", "jax": "a JAX function"}.get(
        lm.kind, f"a .{lm.kind} file")


def _require_torch_model(lm: LoadedModel):
    if lm.kind != "zoo":
        raise PeerUnavailable(f"needs a PyTorch model; '{lm.name}' is {_what(lm)}")
    try:
        import torch
    except ImportError:
        raise PeerUnavailable("PyTorch is not installed (pip install 'tensorforge[torch]')") from None
    return torch


def _torch_peer(key: str, lm: LoadedModel) -> Contender:
    torch = _require_torch_model(lm)
    module, inputs = lm.model, lm.torch_inputs
    t0 = time.perf_counter()
    if key == "eager":
        fn = module
    else:
        options = {"freezing": True} if key == "inductor-freezing" else None
        fn = torch.compile(module, backend="inductor", options=options)

    def run():
        with torch.no_grad():
            return fn(*inputs)

    try:
        first = run()                                # Inductor compiles on the first call
    except Exception as e:                           # a missing C++ compiler, an unsupported op...
        raise PeerUnavailable(f"failed to compile: {type(e).__name__}: {_one_line(e)}") from None
    return Contender(key, run, [t.numpy() for t in torch_outputs(first)], time.perf_counter() - t0)


def _jax_peer(lm: LoadedModel, threads: int) -> Contender:
    """jax.jit of the model's function on XLA's CPU backend; each timed call waits for its result
    (``block_until_ready``), since JAX dispatches asynchronously and returns before computing."""
    if lm.kind != "jax":
        raise PeerUnavailable(f"needs a JAX function; '{lm.name}' is {_what(lm)}")
    try:
        import jax
    except ImportError:
        raise PeerUnavailable("JAX is not installed (pip install 'tensorforge[jax]')") from None
    fn = lm.model
    t0 = time.perf_counter()
    # A fresh wrapper, so that setup_s times XLA's compile even when the reference already jitted fn.
    jitted = jax.jit(lambda *args: fn(*args))
    args = [jax.device_put(a) for a in lm.inputs]      # on the device once, as a JAX user holds them

    def run():
        return jax.block_until_ready(jitted(*args))

    try:
        first = run()
    except Exception as e:                           # a function jax cannot trace with these inputs
        raise PeerUnavailable(f"jax.jit failed: {type(e).__name__}: {_one_line(e)}") from None
    setup_s = time.perf_counter() - t0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    note = "" if threads >= cores else (f"XLA's CPU thread pool is sized when JAX starts (all {cores} cores "
                                        f"unless XLA_FLAGS says otherwise), not by --threads {threads}")
    outputs = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(first)]
    return Contender("jax", run, outputs, setup_s, note=note)


def _onnx_bytes(lm: LoadedModel) -> bytes:
    if lm.kind == "onnx":
        return lm.model.SerializeToString()
    torch = _require_torch_model(lm)
    buf = io.BytesIO()
    names = [f"input{i}" for i in range(len(lm.inputs))]
    try:
        with torch.no_grad():
            torch.onnx.export(lm.model, lm.torch_inputs, buf, dynamo=False, input_names=names)
    except Exception as e:
        raise PeerUnavailable(f"torch.onnx.export failed: {type(e).__name__}: {_one_line(e)}") from None
    return buf.getvalue()


def _input_names(lm: LoadedModel) -> list[str]:
    """The ONNX input names of ``lm``'s inputs, in order (``_onnx_bytes`` names a zoo model's)."""
    return [f"input{i}" for i in range(len(lm.inputs))] if lm.kind == "zoo" else list(lm.input_names)


def _feeds(lm: LoadedModel, arrays: Sequence[np.ndarray], wanted: set[str]) -> dict[str, np.ndarray]:
    """``arrays`` by ONNX input name, for the inputs the model kept (the exporter drops unused ones)."""
    return {n: a for n, a in zip(_input_names(lm), arrays) if n in wanted}


def _quantize_static(model: bytes, lm: LoadedModel, samples: Sequence[tuple]) -> bytes:
    """``model`` quantized by onnxruntime's post-training tool, calibrated (MinMax) on ``samples``."""
    import logging
    import os
    import tempfile

    try:
        import onnx
        from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    except ImportError as e:
        raise PeerUnavailable(f"onnxruntime's quantization tool cannot be imported ({e}); "
                              f"pip install 'tensorforge[onnx]'") from None

    proto = onnx.load_from_string(model)
    inits = {t.name for t in proto.graph.initializer}
    wanted = {i.name for i in proto.graph.input if i.name not in inits}

    class Samples(CalibrationDataReader):
        def __init__(self):
            self.rest = iter(samples)

        def get_next(self):
            sample = next(self.rest, None)
            return None if sample is None else _feeds(lm, sample, wanted)

    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)                 # "consider pre-processing": advice, not a fault
    try:
        with tempfile.TemporaryDirectory() as folder:
            out = os.path.join(folder, "int8.onnx")
            quantize_static(proto, out, Samples(), quant_format=QuantFormat.QDQ, per_channel=True,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
            with open(out, "rb") as f:
                return f.read()
    except Exception as e:                           # onnxruntime's own error types
        raise PeerUnavailable(f"quantize_static failed: {type(e).__name__}: {_one_line(e)}") from None
    finally:
        logging.disable(previous)


def _onnxruntime(lm: LoadedModel, threads: int, precision: str = "f32",
                 samples: Sequence[tuple] | None = None) -> Contender:
    if lm.kind == "tfm":
        raise PeerUnavailable(f"'{lm.name}' is a compiled .tfm file; bench its .onnx or zoo model for peers")
    if lm.kind == "jax":
        raise PeerUnavailable(f"needs an ONNX or PyTorch model; '{lm.name}' is a JAX function")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise PeerUnavailable("onnxruntime is not installed (pip install 'tensorforge[onnx]')") from None
    import warnings
    t0 = time.perf_counter()
    with warnings.catch_warnings():                  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        model = _onnx_bytes(lm)
    precision_label, note = None, ""
    if precision == "int8":
        model = _quantize_static(model, lm, samples or ())
        precision_label = "int8 QDQ"
        note = (f"quantize_static: QDQ, per-channel QInt8 weights, QUInt8 activations, MinMax on the same "
                f"{len(samples or ())} calibration sample(s); it quantizes every op it supports")
    elif precision != "f32":
        precision_label, note = "f32", f"onnxruntime has no {precision} path on CPUs: it runs float32"
    session = onnxruntime_session(model, threads)
    feeds = _feeds(lm, lm.inputs, {i.name for i in session.get_inputs()})

    def run():
        return session.run(None, feeds)

    first = run()
    return Contender("onnxruntime", run, list(first), time.perf_counter() - t0, precision_label, note)


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]
