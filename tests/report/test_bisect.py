"""``tensorforge explain --bisect``: names the op whose kernel is wrong (injected through the
test-only lowering hook), and finds nothing on a correct model."""
import pytest

from tensorforge import models
from tensorforge.cli import main
from tensorforge.frontends.torch import import_torch
from tensorforge.passes.lower.to_structured import lowerings
from tensorforge.passes.lower.to_structured.override import override_lowering
from tensorforge.passes.lower.to_structured.registry import broadcast_read
from tensorforge.passes.pipeline import optimize
from tensorforge.report import bisect


def _relu_as_abs(ctx):
    """A wrong lowering of relu: |x| instead of max(x, 0)."""
    shape = ctx.out_shape()
    (x,) = ctx.inputs
    return [ctx.kb.compute(shape, "p" * len(shape), ctx.out_dtype(),
                           lambda *axes: broadcast_read(x, axes, shape).apply("abs"))]


@pytest.fixture(scope="module")
def mlp():
    net, inputs = models.get("mlp_small")
    module = import_torch(net, inputs)
    optimize(module)
    return module, [t.numpy() for t in inputs]


def test_correct_model_has_no_divergence(mlp):
    result = bisect(*mlp)
    assert result.first is None
    assert len(result.checks) == 5 and all(c.ok for c in result.checks)
    assert max(c.max_rel for c in result.checks) < 1e-5
    assert "all match" in result.text()


def test_bisect_names_the_broken_kernel(mlp):
    module, xs = mlp
    relus = [op for op in module.main.body if op.name == "graph.relu"]
    with override_lowering("graph.relu", _relu_as_abs):
        result = bisect(module, xs)
    bad = result.first
    assert bad is not None
    assert bad.op == "graph.relu" and bad.location == str(relus[0].loc)
    assert bad.max_abs > 1e-2 and bad.max_rel > 1e-2
    assert "relu" in bad.kernel and any("relu" in lab for lab in bad.fused)
    # everything before it (the first gemm) was right
    assert all(c.ok for c in result.checks[:bad.index]) and bad.index == 1
    assert f"first divergence: #{bad.index} graph.relu" in result.text()


def test_override_restores_the_lowering():
    before = lowerings()["graph.relu"]
    with override_lowering("graph.relu", _relu_as_abs):
        assert lowerings()["graph.relu"] is _relu_as_abs
    assert lowerings()["graph.relu"] is before


def test_cli_exit_codes(capsys, tmp_path):
    assert main(["explain", "mlp_small", "--bisect"]) == 0
    assert "all match" in capsys.readouterr().out
    with override_lowering("graph.relu", _relu_as_abs):
        assert main(["explain", "mlp_small", "--bisect", "--html", str(tmp_path / "r.html")]) == 3
    out = capsys.readouterr().out
    assert "first divergence: #1 graph.relu" in out
    html = (tmp_path / "r.html").read_text()
    assert html.count("class='kernel-row'") == 3
