"""Neural-network op lowerings (conv, pools, reductions, softmax, cumsum, norms, attention)
through every level: the graph reference interpreter, the structured kernel evaluated with
NumPy, and the compiled C.  Tolerances: rtol 1e-4 / atol 1e-5 (the harness default) for f32,
where the only difference is summation order; looser where stated (f16).

To keep the file fast, each test compiles its cases as one native module (one gcc run):
``check_cases`` checks every case at the structured level with the shared harness, then
runs all of them natively together against the same references.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

import tensorforge
from tensorforge.ir import Module, tensor, verify
from tensorforge.ir.types import DType
from tensorforge.passes.lower.to_structured import lower_op_to_kernel
from tests.lowering.harness import check_op, one_op_module


class Data:
    """Deterministic inputs per test (each test seeds its own generator)."""

    def __init__(self, seed: int = 0):
        self.r = np.random.default_rng(seed)

    def f32(self, *shape):
        return self.r.standard_normal(shape).astype(np.float32)

    def ints(self, *shape, low=-4, high=4, dtype=np.int32):
        """Small integers: plenty of ties for max/argmax, exact sums."""
        return self.r.integers(low, high, shape).astype(dtype)


@dataclass
class Case:
    name: str
    inputs: list
    attrs: dict = field(default_factory=dict)
    rtol: float = 1e-4
    atol: float = 1e-5

    def __str__(self):
        return f"{self.name}{self.attrs} on {[x.shape for x in self.inputs]}"


def case(name, inputs, rtol=1e-4, atol=1e-5, **attrs) -> Case:
    return Case(name, list(inputs), attrs, rtol, atol)


def check_cases(*cases: Case) -> list[np.ndarray]:
    """Structured level per case (harness), then all cases in one compiled module; returns
    the reference result of each case."""
    refs = [check_op(c.name, c.inputs, rtol=c.rtol, atol=c.atol, native=False, **c.attrs)[0] for c in cases]
    m = Module()
    flat = [x for c in cases for x in c.inputs]
    f = m.add_function("main", [tensor(x.shape, DType.from_np(x.dtype)) for x in flat])
    b, args, results = f.builder(), iter(f.args), []
    for c in cases:
        results.append(b.create(c.name, [next(args) for _ in c.inputs], c.attrs).results[0])
    f.set_return(results)
    verify(m)
    outs = tensorforge.compile(m)(*flat)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for c, r, g in zip(cases, refs, outs):
        np.testing.assert_allclose(g, r, rtol=c.rtol, atol=c.atol, err_msg=f"native C: {c}")
    return refs


def kernel_of(name, inputs, **attrs):
    _, op, _ = one_op_module(name, inputs, **attrs)
    return lower_op_to_kernel(op)


def ops_named(kernel, name):
    return [o for o in kernel.walk() if o.name == name]


# ---- conv -----------------------------------------------------------------------------

def test_conv2d_strided_dilated_grouped_padded():
    d = Data(1)
    x = d.f32(2, 3, 7, 8)
    check_cases(
        case("graph.conv", [x, d.f32(5, 3, 3, 3)]),
        case("graph.conv", [x, d.f32(5, 3, 3, 2), d.f32(5)], strides=(2, 1), pads=(1, 0, 2, 1)),  # asymmetric
        case("graph.conv", [x, d.f32(4, 3, 2, 3)], dilations=(2, 3), pads=(2, 2, 1, 3)),
        case("graph.conv", [d.f32(1, 4, 6, 5), d.f32(6, 2, 3, 3), d.f32(6)], groups=2, pads=(0, 1, 1, 0),
             strides=(1, 2), dilations=(2, 1)),
        case("graph.conv", [x, d.f32(6, 1, 3, 3), d.f32(6)], groups=3, strides=(2, 2),
             pads=(1, 1, 1, 1)),                                                    # depthwise, multiplier 2
        case("graph.conv", [x, d.f32(3, 1, 3, 3)], groups=3),                         # depthwise
    )


def test_conv1d_conv3d_and_f16():
    d = Data(3)
    check_cases(
        case("graph.conv", [d.f32(2, 3, 11), d.f32(4, 3, 3)], strides=(2,), pads=(2, 1), dilations=(2,)),
        case("graph.conv", [d.f32(1, 2, 5, 4, 6), d.f32(4, 1, 2, 3, 2), d.f32(4)], groups=2,
             pads=(1, 0, 1, 0, 1, 1), strides=(1, 2, 1)),
        case("graph.conv", [d.f32(1, 4, 6, 6).astype(np.float16), d.f32(3, 4, 3, 3).astype(np.float16)],
             rtol=1e-2, atol=1e-2, pads=(1, 1, 1, 1)),                         # accumulates in f32
    )


def test_conv_reads_unchecked_without_padding():
    """A window that never leaves the input needs no bounds check in the inner loop; the
    bias is one epilogue compute."""
    d = Data(5)
    plain = kernel_of("graph.conv", [d.f32(1, 2, 6, 6), d.f32(3, 2, 3, 3), d.f32(3)], strides=(2, 2))
    assert all(r.attributes.get("pad") is None for r in ops_named(plain, "structured.read"))
    assert len(ops_named(plain, "structured.compute")) == 2
    padded = kernel_of("graph.conv", [d.f32(1, 2, 6, 6), d.f32(3, 2, 3, 3)], pads=(1, 0, 0, 0))
    assert [r.attributes.get("pad") for r in ops_named(padded, "structured.read")] == [0.0, None]
    assert len(ops_named(padded, "structured.compute")) == 1


def test_conv_transpose():
    d = Data(6)
    cases = [((1, 3, 4, 5), (3, 2, 3, 3), {}),
             ((2, 4, 4, 3), (4, 3, 3, 2), {"strides": (2, 3), "pads": (1, 0, 0, 1), "output_padding": (1, 2),
                                           "groups": 2}),
             ((1, 2, 3, 3), (2, 2, 2, 3), {"strides": (2, 2), "dilations": (2, 1), "pads": (1, 1, 0, 2)}),
             ((1, 4, 5), (4, 2, 3), {"strides": (3,), "dilations": (2,), "output_padding": (2,)}),
             ((1, 2, 3, 3, 2), (2, 1, 2, 2, 2), {"strides": (2, 1, 2), "pads": (0, 1, 0, 1, 0, 0)})]
    check_cases(
        *[case("graph.conv_transpose", [d.f32(*xs), d.f32(*ws), d.f32(ws[1] * a.get("groups", 1))], **a)
          for xs, ws, a in cases],
        case("graph.conv_transpose", [d.f32(1, 3, 4, 4), d.f32(3, 1, 3, 3)], groups=3, strides=(2, 2),
             pads=(1, 1, 1, 1), output_padding=(1, 1)),                           # depthwise, no bias
    )


# ---- pools ----------------------------------------------------------------------------

def test_max_pool():
    d = Data(8)
    x = d.f32(2, 3, 8, 9)
    check_cases(
        case("graph.max_pool", [x], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
        case("graph.max_pool", [x], kernel=(3, 2), strides=(2, 2), pads=(1, 0, 0, 1), ceil_mode=True),
        case("graph.max_pool", [x], kernel=(2, 3), strides=(1, 2), dilations=(2, 2), ceil_mode=True),
        case("graph.max_pool", [d.f32(2, 3, 10)], kernel=(3,), strides=(3,), ceil_mode=True),
        case("graph.max_pool", [d.ints(1, 2, 5, 5, low=-100, high=-50)], kernel=(2, 2),
             pads=(1, 1, 0, 0)),                                   # padding never wins, also for ints
    )


@pytest.mark.parametrize("include", [False, True])
def test_avg_pool(include):
    x = Data(10).f32(2, 3, 8, 9)
    check_cases(
        case("graph.avg_pool", [x], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1), count_include_pad=include),
        case("graph.avg_pool", [x], kernel=(3, 2), strides=(2, 2), pads=(1, 0, 0, 1), ceil_mode=True,
             count_include_pad=include),
        case("graph.avg_pool", [x], kernel=(2, 2), strides=(3, 3), ceil_mode=True, count_include_pad=include),
        case("graph.avg_pool", [x[:, :, :6, :6]], kernel=(2, 2), strides=(2, 2), count_include_pad=include),
    )


def test_avg_pool_without_padding_divides_by_a_constant():
    k = kernel_of("graph.avg_pool", [Data(11).f32(1, 2, 6, 6)], kernel=(2, 2), strides=(2, 2))
    assert not ops_named(k, "scalar.min") and not ops_named(k, "scalar.max")


def test_global_pools():
    d = Data(12)
    check_cases(case("graph.global_avg_pool", [d.f32(2, 3, 4, 5)]),
                case("graph.global_max_pool", [d.f32(2, 3, 7)]))


# ---- reductions -----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["graph.reduce_sum", "graph.reduce_mean", "graph.reduce_max",
                                  "graph.reduce_min", "graph.reduce_prod"])
def test_reduce_axes_and_keepdims(name):
    x = Data(13).f32(3, 4, 5) * 0.5 + (1.0 if name == "graph.reduce_prod" else 0.0)
    check_cases(*[case(name, [x], axes=axes, keepdims=keep)
                  for axes, keep in [((0, 2), False), ((-1, 1), True), ((1,), False), ((), False), ((), True)]])


def test_reduce_int_bool_and_f16():
    d = Data(14)
    check_cases(
        case("graph.reduce_sum", [d.ints(3, 5)], axes=(1,)),
        case("graph.reduce_mean", [d.ints(3, 5, low=-9, high=9)], axes=(1,)),     # truncates toward 0
        case("graph.reduce_max", [d.f32(3, 5) > 0], axes=(0,)),
        case("graph.reduce_min", [d.f32(3, 5) > 0], axes=(0,), keepdims=True),
        case("graph.reduce_sum", [d.f32(3, 40).astype(np.float16)], axes=(1,), rtol=2e-3, atol=1e-2),
    )


def test_arg_reductions_with_ties():
    x = Data(15).ints(4, 6, 3, low=-2, high=2).astype(np.float32)     # many ties
    check_cases(*[case(name, [x], axis=axis, keepdims=keep, select_last_index=last)
                  for name in ("graph.argmax", "graph.argmin") for last in (False, True)
                  for axis, keep in ((1, False), (-1, True))],
                case("graph.argmax", [Data(15).ints(5, 4)], axis=0))


def test_softmax_and_log_softmax():
    d = Data(16)
    x = d.f32(3, 7, 4) * 4
    check_cases(
        case("graph.softmax", [x], axis=1),
        case("graph.softmax", [x]),
        case("graph.log_softmax", [x], axis=1),
        case("graph.log_softmax", [x], axis=0),
        case("graph.softmax", [d.f32(3, 8).astype(np.float16)], rtol=2e-3, atol=1e-3),
    )
    assert len(ops_named(kernel_of("graph.softmax", [x], axis=1), "structured.compute")) == 3


def test_cumsum():
    d = Data(18)
    x, n = d.f32(3, 6, 2), d.ints(5, 3)
    check_cases(*[case("graph.cumsum", [t], axis=axis, exclusive=exclusive, reverse=reverse)
                  for exclusive in (False, True) for reverse in (False, True) for t, axis in ((x, 1), (n, 0))])


# ---- norms ----------------------------------------------------------------------------

def test_layer_norm():
    d = Data(19)
    x = d.f32(3, 4, 5) * 3 + 10                     # a large mean: the two-pass variance matters
    check_cases(
        case("graph.layer_norm", [x, d.f32(4, 5), d.f32(5)], axis=-2),   # last two axes, broadcast bias
        case("graph.layer_norm", [x, d.f32(5)], epsilon=1e-3),           # scale only
        case("graph.layer_norm", [x], axis=0),                           # no scale/bias, every axis
        case("graph.layer_norm", [x.astype(np.float16)], rtol=1e-2, atol=1e-2),
    )


def test_batch_group_and_instance_norm():
    d = Data(20)
    check_cases(
        case("graph.batch_norm", [d.f32(2, 3, 4, 5), d.f32(3), d.f32(3), d.f32(3), np.abs(d.f32(3)) + 0.1],
             epsilon=1e-3),
        case("graph.batch_norm", [d.f32(2, 4), d.f32(4), d.f32(4), d.f32(4), np.abs(d.f32(4))]),
        case("graph.group_norm", [d.f32(2, 6, 3, 4), d.f32(6), d.f32(6)], num_groups=3),
        case("graph.group_norm", [d.f32(2, 4, 5), d.f32(4), d.f32(4)], num_groups=4, epsilon=1e-2),
        case("graph.instance_norm", [d.f32(2, 3, 4, 5), d.f32(3), d.f32(3)]),
        case("graph.instance_norm", [d.f32(2, 3, 6), d.f32(3), d.f32(3)]),
    )


# ---- attention ------------------------------------------------------------------------

def test_attention():
    d = Data(22)
    bool_mask = d.r.random((2, 5, 6)) > 0.4
    bool_mask[0, 1] = False                          # a query that sees no key: output 0
    add_mask = d.f32(5, 6)
    add_mask[0, 3:] = -np.inf
    add_mask[2] = -np.inf                            # every score -inf: output 0
    q, k, v = d.f32(2, 5, 4), d.f32(2, 6, 4), d.f32(2, 6, 3)
    refs = check_cases(
        case("graph.attention", [q, k, v]),
        case("graph.attention", [d.f32(5, 4), d.f32(6, 4), d.f32(6, 3)], scale=0.3),
        case("graph.attention", [d.f32(2, 1, 5, 4), d.f32(3, 5, 4), d.f32(1, 3, 5, 2)], causal=True),
        case("graph.attention", [d.f32(1, 2, 4, 3), d.f32(1, 2, 6, 3), d.f32(1, 2, 6, 3)], causal=True),
        case("graph.attention", [q, k, v, bool_mask]),
        case("graph.attention", [q, k, v, bool_mask[0]], causal=True),
        case("graph.attention", [q, k, v, add_mask]),
    )
    np.testing.assert_array_equal(refs[4][0, 1], 0.0)     # the rule the lowering must keep
    np.testing.assert_array_equal(refs[6][:, 2], 0.0)
