"""JAX models in plain ``jax.numpy`` and ``jax.lax`` (no Flax, no Haiku): the inputs of the
StableHLO frontend's tests and of the jax.jit benchmark peer.

    fn, inputs = jax_models.get("jax_cnn", batch=2)
    jax.jit(fn)(*inputs)                          # what tensorforge.compile(fn, inputs) must match

Together the models cover the StableHLO a JAX program brings: ``dot_general`` with and without
batch dimensions, ``convolution`` under NCHW/OIHW (ResNet) and NHWC/HWIO (CNN) dimension numbers,
``reduce`` and ``reduce_window`` with their regions, ``broadcast_in_dim``, exp, rsqrt, tanh and
erf, and private helper functions (``jax.nn.relu``) that an importer must inline.

Parameters come from a NumPy generator with a fixed seed, not from JAX's PRNG, so two ``get``
calls give the same weights and inputs on every machine and JAX version.  JAX users hold
parameters in two ways and a frontend must take both: closed over (the default; they become
``stablehlo.constant`` ops) or passed as arguments (``params_as_args=True``: ``fn(x, *params)``;
they become function arguments).  Parameters travel as a flat tuple of arrays in ``params(name)``
order rather than a pytree, because a compiled model is called with arrays.

Normalisation gets random statistics and affine parameters, and batch norm is written in its
inference form with jnp ops (scale and shift from the running statistics): identity
normalisation would let an importer get that arithmetic wrong without any test noticing.

Importing this module does not import jax (listing models stays cheap and jax stays optional);
``get`` does.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import TensorforgeError

__all__ = ["GELU", "get", "names", "params", "summary"]

SEED = 0
GELU = ("exact", "tanh")          # exact (erf) first: torch's default
BN_EPS = 1e-5
LN_EPS = 1e-5

Params = dict[str, np.ndarray]

# NCHW activations with OIHW weights (ResNet, as torch lays them out) and NHWC with HWIO (the CNN,
# as JAX code often does): two sets of dimension numbers for the importer's convolution mapping.
NCHW = ("NCHW", "OIHW", "NCHW")
NHWC = ("NHWC", "HWIO", "NHWC")


@dataclass(frozen=True)
class _Spec:
    summary: str
    init: Callable[[np.random.Generator], Params]
    apply: Callable[..., Any]                    # (params, x, **options) -> array
    input_shape: Callable[[int], tuple[int, ...]]
    options: Mapping[str, tuple[str, ...]] = field(default_factory=dict)   # allowed values, default first


# -- parameters (NumPy, float32) -----------------------------------------------------------------

def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float32)


def _init_dense(rng: np.random.Generator, p: Params, name: str, n_in: int, n_out: int) -> None:
    """Uniform in +-1/sqrt(fan_in), as torch.nn.Linear: activations keep their scale."""
    bound = 1.0 / math.sqrt(n_in)
    p[f"{name}.w"] = _f32(rng.uniform(-bound, bound, (n_in, n_out)))
    p[f"{name}.b"] = _f32(rng.uniform(-bound, bound, (n_out,)))


def _init_conv(rng: np.random.Generator, p: Params, name: str, n_in: int, n_out: int, k: int,
               layout: tuple[str, str, str]) -> None:
    """He normal on fan-out, as torchvision's CNNs; shape in ``layout``'s kernel order."""
    std = math.sqrt(2.0 / (n_out * k * k))
    w = rng.standard_normal((n_out, n_in, k, k)) * std                 # OIHW
    p[f"{name}.w"] = _f32(w if layout[1] == "OIHW" else w.transpose(2, 3, 1, 0))


def _init_norm(rng: np.random.Generator, p: Params, name: str, c: int, running: bool) -> None:
    p[f"{name}.gamma"] = _f32(rng.uniform(0.5, 1.5, c))
    p[f"{name}.beta"] = _f32(rng.normal(0.0, 0.1, c))
    if running:
        p[f"{name}.mean"] = _f32(rng.normal(0.0, 0.1, c))
        p[f"{name}.var"] = _f32(rng.uniform(0.5, 1.5, c))


# -- layers (jax.numpy / jax.lax, imported at trace time) ----------------------------------------

def _dense(p: Params, name: str, x):
    import jax.numpy as jnp
    return jnp.dot(x, p[f"{name}.w"]) + p[f"{name}.b"]


def _conv(p: Params, name: str, x, stride: int, pad: int, layout: tuple[str, str, str]):
    from jax import lax
    return lax.conv_general_dilated(x, p[f"{name}.w"], window_strides=(stride, stride),
                                    padding=((pad, pad), (pad, pad)), dimension_numbers=layout)


def _batch_norm(p: Params, name: str, x, layout: tuple[str, str, str]):
    """Inference form: x * scale + shift, scale = gamma / sqrt(var + eps), shift = beta - mean * scale."""
    from jax import lax
    scale = p[f"{name}.gamma"] * lax.rsqrt(p[f"{name}.var"] + BN_EPS)
    shift = p[f"{name}.beta"] - p[f"{name}.mean"] * scale
    shape = (1, -1, 1, 1) if layout[0] == "NCHW" else (1, 1, 1, -1)
    return x * scale.reshape(shape) + shift.reshape(shape)


def _max_pool(x, k: int, stride: int, pad: int, layout: tuple[str, str, str]):
    import jax.numpy as jnp
    from jax import lax
    spatial = layout[0].index("H"), layout[0].index("W")
    window, strides, padding = [1] * 4, [1] * 4, [(0, 0)] * 4
    for axis in spatial:
        window[axis], strides[axis], padding[axis] = k, stride, (pad, pad)
    return lax.reduce_window(x, -jnp.inf, lax.max, tuple(window), tuple(strides), tuple(padding))


def _global_avg_pool(x, layout: tuple[str, str, str]):
    import jax.numpy as jnp
    return jnp.mean(x, axis=(2, 3) if layout[0] == "NCHW" else (1, 2))


def _layer_norm(p: Params, name: str, x):
    import jax.numpy as jnp
    from jax import lax
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + LN_EPS) * p[f"{name}.gamma"] + p[f"{name}.beta"]


def _gelu(x, kind: str):
    """``exact``: x/2 (1 + erf(x/sqrt 2)), torch's default; ``tanh``: the approximation GPT-2 and
    jax.nn.gelu's default use."""
    import jax.numpy as jnp
    from jax import lax
    if kind == "exact":
        return 0.5 * x * (1.0 + lax.erf(x * (1.0 / math.sqrt(2.0))))
    return 0.5 * x * (1.0 + jnp.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def _softmax(s):
    """Over the last axis, the running maximum subtracted first so that exp cannot overflow."""
    import jax.numpy as jnp
    from jax import lax
    e = jnp.exp(s - lax.stop_gradient(jnp.max(s, axis=-1, keepdims=True)))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _relu(x):
    import jax
    return jax.nn.relu(x)            # lowers to a private func.func plus func.call: the importer inlines it


# -- MLP ------------------------------------------------------------------------------------------

_MLP_SIZES = (784, 512, 512, 10)


def _mlp_init(rng: np.random.Generator) -> Params:
    p: Params = {}
    for i, (n_in, n_out) in enumerate(zip(_MLP_SIZES[:-1], _MLP_SIZES[1:])):
        _init_dense(rng, p, f"fc{i + 1}", n_in, n_out)
    return p


def _mlp_apply(p: Params, x):
    x = _relu(_dense(p, "fc1", x))
    x = _relu(_dense(p, "fc2", x))
    return _dense(p, "fc3", x)


# -- CNN (NHWC) -----------------------------------------------------------------------------------

_CNN_WIDTHS = (3, 16, 32)


def _cnn_init(rng: np.random.Generator) -> Params:
    p: Params = {}
    for i, (n_in, n_out) in enumerate(zip(_CNN_WIDTHS[:-1], _CNN_WIDTHS[1:])):
        _init_conv(rng, p, f"conv{i + 1}", n_in, n_out, 3, NHWC)
        _init_norm(rng, p, f"bn{i + 1}", n_out, running=True)
    _init_dense(rng, p, "fc", _CNN_WIDTHS[-1], 10)
    return p


def _cnn_apply(p: Params, x):
    """Two (3x3 conv, batch norm, relu, 2x2 max pool) stages, global average pool, dense."""
    for i in range(1, len(_CNN_WIDTHS)):
        x = _relu(_batch_norm(p, f"bn{i}", _conv(p, f"conv{i}", x, 1, 1, NHWC), NHWC))
        x = _max_pool(x, 2, 2, 0, NHWC)
    return _dense(p, "fc", _global_avg_pool(x, NHWC))


# -- transformer encoder block --------------------------------------------------------------------

_HIDDEN, _HEADS, _FFN, _SEQ = 256, 4, 1024, 128


def _transformer_init(rng: np.random.Generator) -> Params:
    p: Params = {}
    for name in ("q", "k", "v", "o"):
        _init_dense(rng, p, f"attn.{name}", _HIDDEN, _HIDDEN)
    _init_norm(rng, p, "ln1", _HIDDEN, running=False)
    _init_dense(rng, p, "ffn.up", _HIDDEN, _FFN)
    _init_dense(rng, p, "ffn.down", _FFN, _HIDDEN)
    _init_norm(rng, p, "ln2", _HIDDEN, running=False)
    return p


def _attention(p: Params, x):
    """Multi-head self-attention; the score and context products are dot_generals with the batch
    and head axes as batch dimensions."""
    import jax.numpy as jnp
    b, s, h = x.shape
    d = h // _HEADS

    def heads(name):
        return _dense(p, f"attn.{name}", x).reshape(b, s, _HEADS, d)

    q, k, v = heads("q"), heads("k"), heads("v")
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(d))
    context = jnp.einsum("bhqk,bkhd->bqhd", _softmax(scores), v).reshape(b, s, h)
    return _dense(p, "attn.o", context)


def _transformer_apply(p: Params, x, gelu: str = GELU[0]):
    """Post-norm block as in BERT: LN(x + attention(x)), then LN(h + FFN(h)) with a GELU FFN."""
    h = _layer_norm(p, "ln1", x + _attention(p, x))
    return _layer_norm(p, "ln2", h + _dense(p, "ffn.down", _gelu(_dense(p, "ffn.up", h), gelu)))


# -- ResNet-18 (NCHW) -----------------------------------------------------------------------------

_RESNET_STAGES = 4
_RESNET_BLOCKS = 2


def _block_strides():
    """(stage, block, stride) for every basic block: stride 2 opens stages 2-4."""
    for stage in range(_RESNET_STAGES):
        for block in range(_RESNET_BLOCKS):
            yield stage, block, 2 if stage > 0 and block == 0 else 1


def _resnet_init(rng: np.random.Generator, widths: tuple[int, ...], classes: int) -> Params:
    p: Params = {}
    _init_conv(rng, p, "conv1", 3, widths[0], 7, NCHW)
    _init_norm(rng, p, "bn1", widths[0], running=True)
    n_in = widths[0]
    for stage, block, stride in _block_strides():
        name, width = f"layer{stage + 1}.{block}", widths[stage]
        _init_conv(rng, p, f"{name}.conv1", n_in, width, 3, NCHW)
        _init_norm(rng, p, f"{name}.bn1", width, running=True)
        _init_conv(rng, p, f"{name}.conv2", width, width, 3, NCHW)
        _init_norm(rng, p, f"{name}.bn2", width, running=True)
        if stride != 1 or n_in != width:
            _init_conv(rng, p, f"{name}.down.conv", n_in, width, 1, NCHW)
            _init_norm(rng, p, f"{name}.down.bn", width, running=True)
        n_in = width
    _init_dense(rng, p, "fc", widths[-1], classes)
    return p


def _basic_block(p: Params, name: str, x, stride: int):
    out = _relu(_batch_norm(p, f"{name}.bn1", _conv(p, f"{name}.conv1", x, stride, 1, NCHW), NCHW))
    out = _batch_norm(p, f"{name}.bn2", _conv(p, f"{name}.conv2", out, 1, 1, NCHW), NCHW)
    if f"{name}.down.conv.w" in p:           # 1x1 projection where the shape changes
        x = _batch_norm(p, f"{name}.down.bn", _conv(p, f"{name}.down.conv", x, stride, 0, NCHW), NCHW)
    return _relu(out + x)


def _resnet_apply(p: Params, x):
    """torchvision's ResNet-18 layout: 7x7/2 conv stem, 3x3/2 max pool, four stages of two basic
    blocks, global average pool, dense."""
    x = _relu(_batch_norm(p, "bn1", _conv(p, "conv1", x, 2, 3, NCHW), NCHW))
    x = _max_pool(x, 3, 2, 1, NCHW)
    for stage, block, stride in _block_strides():
        x = _basic_block(p, f"layer{stage + 1}.{block}", x, stride)
    return _dense(p, "fc", _global_avg_pool(x, NCHW))


# -- the table ------------------------------------------------------------------------------------

_MODELS: dict[str, _Spec] = {
    "jax_mlp": _Spec("MLP 784-512-512-10 with ReLU", _mlp_init, _mlp_apply, lambda b: (b, 784)),
    "jax_cnn": _Spec("CNN, NHWC: 2x (3x3 conv, batch norm, ReLU, 2x2 max pool), global average pool, "
                     "dense; 32x32x3 input, 10 classes", _cnn_init, _cnn_apply, lambda b: (b, 32, 32, 3)),
    "jax_transformer": _Spec(f"transformer encoder block: {_HEADS}-head self-attention, layer norm, GELU FFN "
                             f"{_HIDDEN}-{_FFN}-{_HIDDEN}, residuals; seq {_SEQ}, hidden {_HIDDEN}",
                             _transformer_init, _transformer_apply, lambda b: (b, _SEQ, _HIDDEN),
                             {"gelu": GELU}),
    "jax_resnet18": _Spec("ResNet-18 layout (torchvision), NCHW, batch norm in inference form; 224x224",
                          functools.partial(_resnet_init, widths=(64, 128, 256, 512), classes=1000),
                          _resnet_apply, lambda b: (b, 3, 224, 224)),
    "jax_resnet18_small": _Spec("ResNet-18 layout with widths 8-64, NCHW; 32x32 input, 10 classes",
                                functools.partial(_resnet_init, widths=(8, 16, 32, 64), classes=10),
                                _resnet_apply, lambda b: (b, 3, 32, 32)),
}


def names() -> list[str]:
    """Every JAX model name (all start with ``jax_``, apart from the torch zoo's names)."""
    return list(_MODELS)


def _spec(name: str) -> _Spec:
    try:
        return _MODELS[name]
    except KeyError:
        raise TensorforgeError(f"unknown JAX model '{name}' (known: {', '.join(_MODELS)})") from None


def summary(name: str) -> str:
    """One line on what ``name`` is, without building it (no jax needed)."""
    return _spec(name).summary


def params(name: str) -> Params:
    """The parameters of ``name`` by name, in the order ``get(..., params_as_args=True)`` takes them."""
    return _spec(name).init(np.random.default_rng(SEED))


def _require_jax(name: str) -> None:
    try:
        import jax  # noqa: F401
    except ImportError:
        raise TensorforgeError(f"JAX model '{name}' needs JAX: pip install 'tensorforge[jax]'") from None


def _options(name: str, spec: _Spec, given: Mapping[str, str]) -> dict[str, str]:
    for key, value in given.items():
        if key not in spec.options:
            known = ", ".join(spec.options) or "none"
            raise TensorforgeError(f"JAX model '{name}' has no option '{key}' (its options: {known})")
        if value not in spec.options[key]:
            raise TensorforgeError(f"JAX model '{name}': {key}='{value}' is not one of "
                                   f"{', '.join(spec.options[key])}")
    return dict(given)


def get(name: str, batch: int | None = None, params_as_args: bool = False, input_seed: int | None = None,
        **options: str) -> tuple[Callable[..., Any], tuple[np.ndarray, ...]]:
    """``(fn, example_inputs)``: a jax.jit-able function and float32 NumPy inputs for it.

    ``batch`` defaults to 1.  By default the parameters are closed over and ``fn(x)`` takes the
    data alone; ``params_as_args=True`` gives ``fn(x, *params)`` with the parameters appended
    to ``example_inputs`` (in ``params(name)`` order).  ``input_seed`` draws other inputs of the
    same shape; the parameters never change.  ``options``: ``gelu="exact"|"tanh"`` for
    ``jax_transformer``.
    """
    spec = _spec(name)
    opts = _options(name, spec, options)
    batch = 1 if batch is None else int(batch)
    if batch < 1:
        raise TensorforgeError(f"JAX model '{name}': batch must be at least 1, got {batch}")
    _require_jax(name)
    weights = params(name)
    rng = np.random.default_rng(SEED + 1 if input_seed is None else int(input_seed))
    x = _f32(rng.standard_normal(spec.input_shape(batch)))
    if params_as_args:
        keys = tuple(weights)

        def fn(x, *flat):
            if len(flat) != len(keys):
                raise TypeError(f"{name} takes the input and {len(keys)} parameters, got {len(flat)}")
            return spec.apply(dict(zip(keys, flat)), x, **opts)

        example: tuple[np.ndarray, ...] = (x, *weights.values())
    else:
        def fn(x):
            return spec.apply(weights, x, **opts)

        example = (x,)
    fn.__name__ = fn.__qualname__ = name          # the lowered module is then called jit_<name>
    fn.__doc__ = spec.summary
    return fn, example
