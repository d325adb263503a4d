"""JAX models end to end through the public API: ``tensorforge.compile(fn, example_inputs)``
imports ``jax.jit(fn).lower(...)``'s StableHLO, and the compiled model matches jax's own CPU
output (``jax.jit(fn)``) within rtol 1e-4 and atol 1e-4 (the models' outputs are of order 1).

The models are tensorforge/models/jax_models.py's small variants, with parameters closed over
(they reach the importer as constants) and, for the MLP and the CNN, passed as arguments (they
reach it as function arguments).  ``tensorforge bench`` on a JAX model is checked here too, as it
compiles through the same API.
"""
import json

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import tensorforge  # noqa: E402
from tensorforge.models import jax_models  # noqa: E402

RTOL = ATOL = 1e-4


def _flat(out) -> list[np.ndarray]:
    return [np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,))]


def _check(fn, inputs) -> None:
    cm = tensorforge.compile(fn, inputs)
    ours = _flat(cm(*inputs))
    theirs = _flat(jax.tree_util.tree_leaves(jax.jit(fn)(*inputs)))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", ["jax_mlp", "jax_cnn", "jax_transformer", "jax_resnet18_small"])
def test_closed_over_parameters(name):
    _check(*jax_models.get(name))


@pytest.mark.parametrize("name", ["jax_mlp", "jax_cnn"])
def test_parameters_as_arguments(name):
    _check(*jax_models.get(name, params_as_args=True))


def test_tanh_gelu_transformer():
    _check(*jax_models.get("jax_transformer", gelu="tanh"))


def test_batch_of_two_and_an_already_jitted_function():
    fn, inputs = jax_models.get("jax_cnn", batch=2)
    _check(jax.jit(fn), inputs)


def test_jax_arrays_in_jax_arrays_out():
    fn, inputs = jax_models.get("jax_mlp")
    cm = tensorforge.compile(fn, inputs)
    out = cm(*(jax.numpy.asarray(x) for x in inputs))
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), np.asarray(jax.jit(fn)(*inputs)), rtol=RTOL, atol=ATOL)


def test_bench_compiles_a_jax_model_and_times_jax_jit(tmp_path, capsys):
    from tensorforge.cli import main

    js = tmp_path / "b.json"
    code = main(["bench", "jax_cnn", "--json", str(js), "--chart", str(tmp_path / "b.png"), "--repeats", "2",
                 "--warmup", "1", "--threads", "1", "--no-progress", "--db", "none"])
    out = capsys.readouterr().out
    assert code == 0, out
    (model,) = json.loads(js.read_text())["models"]
    assert model["check"]["reference"] == "jax.jit" and model["check"]["max_rel_err"] < 1e-4
    assert [c["key"] for c in model["contenders"]] == ["tensorforge", "jax"]
    assert model["gflop"] > 0                       # the imported graph's work, as for any model
