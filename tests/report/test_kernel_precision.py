"""The precision of every kernel in `explain --html` (and its text summary): read off the kernel's
ops and types, so int8, bf16 and float32 kernels of any model are told apart."""
import numpy as np
import pytest

from tensorforge import models
from tensorforge.codegen.target import Target
from tensorforge.report.collect import kernel_precision, lower_with_log

from ..commands.conftest import run_cli


@pytest.fixture(scope="module")
def mlp_graph():
    pytest.importorskip("torch")
    from tensorforge.frontends.torch import import_torch
    net, inputs = models.get("mlp_small")
    samples = [tuple(t.numpy() for t in models.get("mlp_small", input_seed=s)[1]) for s in (1, 2)]
    return import_torch(net, inputs), samples


def _kernels(module):
    lowered, log = lower_with_log(module, Target.host())
    return [op for op in lowered.main.body if op.name == "structured.kernel"]


def _contains(kernel, name: str) -> bool:
    return any(op.name == name for op in kernel.walk())


def test_float32_bf16_and_int8_kernels_are_told_apart(mlp_graph):
    from tensorforge.quantization import quantize
    from tensorforge.quantization.bf16 import bf16_module
    graph, samples = mlp_graph
    assert {kernel_precision(k) for k in _kernels(graph)} == {"f32"}

    bf16 = _kernels(bf16_module(graph, None))                    # lowering only: any CPU will do
    assert sum(_contains(k, "graph.bf16_matmul") for k in bf16) == 3
    for k in bf16:
        assert kernel_precision(k) == ("bf16" if _contains(k, "graph.bf16_matmul") else "f32")

    int8 = _kernels(quantize(graph, samples, keep_first_last=False))
    assert sum(_contains(k, "graph.qmatmul") for k in int8) == 3
    for k in int8:
        assert (kernel_precision(k) == "int8") == _contains(k, "graph.qmatmul")
    # the quantize step before the first int8 layer converts float32 activations to uint8
    assert kernel_precision(int8[0]) == "f32->ui8"


def test_explain_html_of_a_quantized_model_shows_the_precision_column(mlp_graph, tmp_path, capsys):
    _, samples = mlp_graph
    np.savez(tmp_path / "cal.npz", x=np.concatenate([s[0] for s in samples]))
    code, _, err = run_cli(["quantize", "mlp_small", "--calibration", tmp_path / "cal.npz", "-o", tmp_path / "q.tfm",
                            "--quantize-first-last", "--db", "none"], capsys)
    assert code == 0, err
    html = tmp_path / "q.html"
    code, out, err = run_cli(["explain", tmp_path / "q.tfm", "--html", html, "--profile-runs", "1"], capsys)
    assert code == 0, err
    assert "precision int8 3 kernel(s)" in out
    top = [line.split() for line in out.splitlines() if line.startswith("  ") and "%" in line]
    assert top and all((row[1] == "int8") == row[2].endswith("qmatmul") for row in top)
    text = html.read_text()
    head = text[text.index("class='kernel-table'"):]
    assert "<th>kind</th><th>precision</th>" in head
    assert text.count("<span class='precision'>int8</span>") == 3
    assert text.count("class='kernel-row'") == text.count("<span class='precision'>")
    assert "Precision: int8 3 kernel(s)" in text
