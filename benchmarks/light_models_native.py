"""Compiles the onnx package's 9 light_* models natively with seeded random weights and
compares them with onnxruntime on the same file (max relative error), printing compile times.

    .venv/bin/python benchmarks/light_models_native.py [squeezenet vgg19 ...]

The same check runs in CI as tests/frontends/test_onnx_light_models_native.py (other random
weights, logits compared); this script is for a quick look at compile times. Since the GEMM
micro-kernels became translation units cached as objects (``toolchain.unit``), a model compiles
in seconds after the first one, which builds the units.
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

import tensorforge


def randomize(model: onnx.ModelProto, rng: np.random.Generator) -> None:
    """He-scaled random float weights; 1-D tensors (biases, BN stats) positive around 1."""
    for init in model.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.dtype != np.float32:
            continue
        fan = max(1, int(np.prod(a.shape[1:]))) if a.ndim > 1 else 1
        v = rng.standard_normal(a.shape).astype(np.float32) * np.float32(np.sqrt(2.0 / fan))
        if a.ndim == 1:
            v = rng.uniform(0.5, 1.5, a.shape).astype(np.float32)
        init.CopyFrom(numpy_helper.from_array(v, init.name))


def strip_final_softmax(model: onnx.ModelProto) -> None:
    """Compare logits: a saturated softmax would hide errors behind exact 0s and 1s."""
    graph = model.graph
    last = graph.node[-1]
    if last.op_type == "Softmax" and last.output[0] == graph.output[0].name:
        graph.output[0].name = last.input[0]
        graph.node.remove(last)


def main() -> None:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light")
    rng = np.random.default_rng(0)
    only = set(sys.argv[1:])
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".onnx")):
        if only and not any(o in name for o in only):
            continue
        model = onnx.load(os.path.join(folder, name))
        randomize(model, rng)
        strip_final_softmax(model)
        weights = {i.name for i in model.graph.initializer}
        feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
                 for i in model.graph.input if i.name not in weights}
        t0 = time.perf_counter()
        cm = tensorforge.compile(model)
        compile_s = time.perf_counter() - t0
        out = cm(*feeds.values())
        out = out[0] if isinstance(out, tuple) else out
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        err = float(np.abs(out - ref).max() / max(np.abs(ref).max(), 1e-30))
        print(f"{name:28s} compile {compile_s:6.1f} s   max rel err {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
