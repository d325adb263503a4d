"""The model zoo: every small variant runs with the right output shapes, models are seeded and
deterministic, and the full-size architectures have the parameter counts of their references."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tensorforge.models as zoo  # noqa: E402
from tensorforge.errors import TensorforgeError  # noqa: E402

SMALL = ["mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
         "bert_tiny", "gpt2_tiny"]

# Output shapes at batch 2, as tuples of shapes in the model's output order.
OUTPUT_SHAPES = {
    "mlp_small": [(2, 10)],
    "resnet18_small": [(2, 10)],
    "resnet50_small": [(2, 10)],
    "mobilenet_v2_small": [(2, 10)],
    "efficientnet_b0_small": [(2, 10)],
    "bert_tiny": [(2, 32, 128), (2, 128)],
    "gpt2_tiny": [(2, 32, 1000)],
}

# torchvision / HF parameter counts of the reference architectures.
REFERENCE_PARAMS = {
    "mlp": 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10,
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "bert_base": 109_482_240,
    "gpt2_small": 124_439_808,
}


def _run(module, inputs):
    with torch.no_grad():
        out = module(*inputs)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def test_names_has_every_model_and_small_variant():
    assert set(zoo.names()) == set(SMALL) | set(REFERENCE_PARAMS)


@pytest.mark.parametrize("name", SMALL)
def test_small_variant_runs_with_expected_shapes(name):
    module, inputs = zoo.get(name, batch=2)
    assert not module.training
    outs = _run(module, inputs)
    assert [o.shape for o in outs] == OUTPUT_SHAPES[name]
    for o in outs:
        assert np.isfinite(o).all()
        assert np.abs(o).max() > 1e-3          # random weights, but not a dead network


@pytest.mark.parametrize("name", SMALL)
def test_two_gets_give_identical_weights_inputs_and_outputs(name):
    state = torch.get_rng_state()
    m1, in1 = zoo.get(name, batch=2)
    m2, in2 = zoo.get(name, batch=2)
    assert torch.equal(torch.get_rng_state(), state), "get() must not move the global torch RNG"
    sd1, sd2 = m1.state_dict(), m2.state_dict()
    assert sd1.keys() == sd2.keys()
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), k
    for a, b in zip(in1, in2):
        assert torch.equal(a, b)
    for a, b in zip(_run(m1, in1), _run(m2, in2)):
        np.testing.assert_array_equal(a, b)


def test_batch_norm_statistics_are_not_trivial():
    module, _ = zoo.get("resnet18_small")
    bn = module.bn1
    assert not torch.allclose(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert not torch.allclose(bn.running_var, torch.ones_like(bn.running_var))
    assert not torch.allclose(bn.weight, torch.ones_like(bn.weight))
    assert (bn.running_var > 0).all()


def test_batch_argument_sets_leading_dimension():
    _, inputs = zoo.get("mlp_small", batch=64)
    assert inputs[0].shape == (64, 784)
    _, (ids, mask) = zoo.get("bert_tiny", batch=3)
    assert ids.dtype == mask.dtype == torch.int64
    assert ids.shape == mask.shape == (3, 32)
    assert mask[:, 0].all() and set(mask.unique().tolist()) <= {0, 1}


def test_gpt2_is_causal_and_lm_head_is_tied():
    module, (ids,) = zoo.get("gpt2_tiny")
    assert module.lm_head.weight is module.wte.weight
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1) % module.cfg.vocab
    a, b = _run(module, (ids,))[0], _run(module, (changed,))[0]
    np.testing.assert_array_equal(a[:, :-1], b[:, :-1])   # the future does not leak backwards
    assert not np.array_equal(a[:, -1], b[:, -1])


def test_bert_ignores_padded_tokens():
    module, (ids, mask) = zoo.get("bert_tiny")
    mask = mask.clone()
    mask[0, -4:] = 0
    changed = ids.clone()
    changed[0, -4:] = (ids[0, -4:] + 7) % module.cfg.vocab
    a = _run(module, (ids, mask))
    b = _run(module, (changed, mask))
    np.testing.assert_allclose(a[0][:, :-4], b[0][:, :-4], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(REFERENCE_PARAMS))
def test_full_size_architecture_matches_reference_parameter_count(name):
    info = zoo.describe(name)
    assert info.params == REFERENCE_PARAMS[name]
    assert info.default_batch == 1
    assert all(shape[0] == 1 for shape, _ in info.inputs)
    assert name in str(info)


def test_unknown_model_names_the_known_ones():
    with pytest.raises(TensorforgeError, match="unknown model 'resnet19'.*resnet18"):
        zoo.get("resnet19")
