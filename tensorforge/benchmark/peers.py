"""The peers ``tensorforge bench`` times: torch eager, torch.compile (Inductor, with and without
freezing) and onnxruntime, each set up on the same inputs and weights as tensorforge.

A peer that is not installed, does not apply to the model (torch peers need a torch model) or
fails to set up is skipped with a one-line reason instead of stopping the benchmark: the point
is a comparison against whatever the user has.  Zoo models reach onnxruntime through
``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``), which needs neither
network nor onnxscript.
"""
from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..commands.loading import LoadedModel, onnxruntime_session, torch_outputs

PEERS = ("eager", "inductor", "inductor-freezing", "onnxruntime")
LABELS = {"tensorforge": "tensorforge", "eager": "torch eager", "inductor": "torch.compile",
          "inductor-freezing": "torch.compile+freezing", "onnxruntime": "onnxruntime"}


class PeerUnavailable(Exception):
    """A peer that cannot run this model here; the message says why (shown as a note)."""


@dataclass
class Contender:
    """One implementation of the model: ``run`` is one inference on the bench inputs."""

    key: str
    run: Callable[[], Any]
    outputs: list[np.ndarray]        # from the first call, for the output check
    setup_s: float                   # compile / export / session creation, including the first call

    @property
    def label(self) -> str:
        return LABELS.get(self.key, self.key)


def make_peer(key: str, lm: LoadedModel, threads: int) -> Contender:
    """Sets up peer ``key`` (one of ``PEERS``) for ``lm``; raises ``PeerUnavailable`` with a reason."""
    if key not in PEERS:
        raise PeerUnavailable(f"unknown peer '{key}' (known: {', '.join(PEERS)})")
    if key == "onnxruntime":
        return _onnxruntime(lm, threads)
    return _torch_peer(key, lm)


def _require_torch_model(lm: LoadedModel):
    if lm.kind != "zoo":
        raise PeerUnavailable(f"needs a PyTorch model; '{lm.name}' is a .{lm.kind} file")
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


def _onnxruntime(lm: LoadedModel, threads: int) -> Contender:
    if lm.kind == "tfm":
        raise PeerUnavailable(f"'{lm.name}' is a compiled .tfm file; bench its .onnx or zoo model for peers")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise PeerUnavailable("onnxruntime is not installed (pip install 'tensorforge[onnx]')") from None
    import warnings
    t0 = time.perf_counter()
    with warnings.catch_warnings():                  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        model = _onnx_bytes(lm)
    session = onnxruntime_session(model, threads)
    names = {f"input{i}": a for i, a in enumerate(lm.inputs)} if lm.kind == "zoo" else \
        dict(zip(lm.input_names, lm.inputs))
    feeds = {i.name: names[i.name] for i in session.get_inputs()}   # the exporter drops unused inputs

    def run():
        return session.run(None, feeds)

    first = run()
    return Contender("onnxruntime", run, list(first), time.perf_counter() - t0)


def _one_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]
