"""Fusion on the zoo's small models (the full-size ones have the same blocks; their counts are in
benchmarks/fusion.py): fewer kernels, the groups the issue asks for, same numbers.

- ResNet-50 / MobileNetV2: conv + batch_norm + relu (+ residual add) is one kernel, with the
  BatchNorm folded by the graph optimiser and without it;
- BERT / GPT-2: layer norm is one kernel, softmax is one kernel, Q/K/V are one GEMM.

Numerics: every fused module against the graph interpreter on the model's example inputs,
through the structured interpreter (rtol 1e-4 relative to the output's scale).
"""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

import tensorforge  # noqa: E402
from tensorforge import models  # noqa: E402
from tensorforge.ir.interpreter import run_function  # noqa: E402
from tensorforge.passes.fusion import fuse_function  # noqa: E402
from tensorforge.passes.fusion.evaluate import run_lowered  # noqa: E402
from tensorforge.passes.pipeline import optimize  # noqa: E402

NAMES = ("resnet50_small", "mobilenet_v2_small", "bert_tiny", "gpt2_tiny")


@pytest.fixture(scope="module")
def imported():
    out = {}
    for name in NAMES:
        module, inputs = models.get(name)
        out[name] = (tensorforge.import_model(module, inputs), [x.numpy() for x in inputs])
    return out


def fused(imported, name, optimized=True):
    m, inputs = imported[name]
    m = m.clone()
    if optimized:
        optimize(m)
    work = m.clone()
    log = fuse_function(work.main)
    want = run_function(m.main, inputs)
    got = run_lowered(work.main, inputs)
    for g, w in zip(got, want):
        scale = max(float(np.abs(w).max()), 1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * scale, err_msg=name)
    return log


def ops_of(group) -> list[str]:
    return [lab.split(":", 1)[1].split("#")[0] for lab in group.labels]


@pytest.mark.parametrize("name", NAMES)
def test_fusion_cuts_kernels_and_keeps_numerics(imported, name):
    log = fused(imported, name)
    assert log.kernels_after < 0.6 * log.kernels_before, log.summary()
    assert all(d.reason for d in log.decisions)


@pytest.mark.parametrize("optimized", [True, False], ids=["bn-folded", "bn-unfolded"])
@pytest.mark.parametrize("name", ["resnet50_small", "mobilenet_v2_small"])
def test_conv_bn_activation_residual_are_one_kernel(imported, name, optimized):
    log = fused(imported, name, optimized)
    groups = [ops_of(g) for g in log.groups]
    for ops in groups:
        if any(o in ("batch_norm", "relu", "clip") for o in ops):
            assert "conv" in ops or "max_pool" in ops or "reduce_mean" in ops, ops
    # no normalisation, activation or residual add is left in a kernel of its own
    assert not [ops for ops in groups if set(ops) <= {"batch_norm", "relu", "clip", "add"}]
    residual = [ops for ops in groups if "conv" in ops and "add" in ops]
    assert residual, "a residual add fused into its block's last convolution"
    if not optimized:
        assert [ops for ops in groups if ops[:3] == ["conv", "batch_norm", "relu"]
                or ops[:3] == ["conv", "batch_norm", "clip"]]


@pytest.mark.parametrize("name,layers", [("bert_tiny", 2), ("gpt2_tiny", 2)])
def test_transformer_groups(imported, name, layers):
    log = fused(imported, name)
    groups = [ops_of(g) for g in log.groups]
    for op in ("layer_norm", "softmax"):
        holders = [ops for ops in groups if op in ops]
        assert holders and all(ops.count(op) == 1 for ops in holders), (op, holders)
        assert sum(ops.count(op) for ops in holders) == sum(1 for _ in log.nodes if _.endswith(f":{op}"))
    # Q, K and V: one GEMM per layer (BERT: concatenated by fusion; GPT-2: already one c_attn),
    # whose slices fold into the attention's batch matmuls
    bmm_groups = [ops for ops in groups if "batch_matmul" in ops]
    assert len(bmm_groups) == 2 * layers
    assert all(("slice" in ops or "split" in ops) for ops in bmm_groups)
    if name == "bert_tiny":
        concat = [d for d in log.decisions if d.strategy == "concat" and d.fused]
        assert len(concat) == layers and all(len(d.subjects) == 3 for d in concat)


def test_explain_fusion_cli(tmp_path, capsys):
    from tensorforge.cli import main
    out = tmp_path / "mlp.svg"
    assert main(["explain", "mlp_small", "--fusion", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "decisions:" in text and "groups:" in text and "kernels:" in text
    assert "gemm" in text and "relu" in text
    written = out if out.exists() else out.with_suffix(".txt")
    assert written.exists() and written.stat().st_size > 100
    if out.exists():
        assert "<svg" in out.read_text() and out.with_suffix(".dot").exists()


def test_picture_without_graphviz(imported, tmp_path, monkeypatch):
    from tensorforge.passes.fusion import explain
    report = explain.explain_fusion(imported["resnet50_small"][0])
    monkeypatch.setattr(explain.shutil, "which", lambda name: None)
    written = explain.write_picture(report.log, tmp_path / "r.svg")
    assert written.suffix == ".txt"
    text = written.read_text()
    assert text.startswith("kernels:") and "[#0]" in text and "k0:conv" in text
    dot = explain.to_dot(report.log)
    assert dot.startswith("digraph") and "subgraph cluster_" in dot and "->" in dot
