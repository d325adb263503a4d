"""Small models for the runtime tests, built with the IR builder (no frontend, no torch needed)."""
from __future__ import annotations

import numpy as np

from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor

W_SEED = 7


def weights() -> np.ndarray:
    return np.random.default_rng(W_SEED).standard_normal((8, 16)).astype(np.float32)


def two_in_two_out() -> ModuleOp:
    """main(x: f32[4,8], b: f32[16]) -> (h = relu(x @ W + b), h * h), W a constant."""
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((4, 8)), tensor((16,))], arg_names=["x", "b"])
    g = f.builder().graph
    h = g.relu(g.add(g.matmul(f.args[0], g.constant(weights())), f.args[1]))
    f.set_return([h, g.mul(h, h)])
    return m


def reference(x: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h = np.maximum(x.astype(np.float64) @ weights().astype(np.float64) + b, 0.0)
    return h, h * h


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal(16).astype(np.float32))


def wide_mlp(width: int = 256) -> ModuleOp:
    """main(x: f32[64, width]) -> relu(x @ W1) @ W2: enough parallel work for threads to matter."""
    rng = np.random.default_rng(1)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((64, width))], arg_names=["x"])
    g = f.builder().graph
    w1 = g.constant((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32))
    w2 = g.constant(rng.standard_normal((width, 10)).astype(np.float32))
    f.set_return([g.matmul(g.relu(g.matmul(f.args[0], w1)), w2)])
    return m
