"""The NaN/Inf table (issue 14): every graph op with float inputs, fed NaN, +-Inf and -0.0.

For each op the native build (the default, IEEE) and the interpreter must put NaN at exactly the
positions where the reference does, and equal values elsewhere.  The reference is PyTorch where
it defines the op, else ONNX's (NumPy) semantics; where the two disagree the table says which it
follows (``sign``: ONNX, NaN in NaN out; torch gives 0).  Ops are compiled a group at a time, one
module (and one C compile) per group, so the table costs a few compiles.  ``test_every_graph_op_is
_in_the_table`` keeps it complete: a new graph op must get a row or a reason.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import tensorforge  # noqa: E402
from tensorforge.ir import DType, Module, tensor  # noqa: E402
from tensorforge.ir import opdef  # noqa: E402


def special(shape, seed: int, dtype=np.float32) -> np.ndarray:
    """Normal randoms with NaN, +Inf, -Inf, -0.0 and a denormal at fixed spread-out positions."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    n = flat.size
    for k, v in enumerate((np.nan, np.inf, -np.inf, -0.0, 1e-40)):
        flat[(k * 7 + seed) % n] = v
    return x


class Row:
    """One op of the table: how to build it on graph values, and the reference on torch tensors."""

    def __init__(self, op: str, inputs: list[np.ndarray], build: Callable, ref: Callable, tol: float = 1e-5):
        self.op, self.inputs, self.build, self.ref, self.tol = op, inputs, build, ref, tol


def unary(op: str, ref: Callable, **attrs) -> Row:
    return Row(op, [special((3, 17), 1)], lambda g, x: getattr(g, op)(x, **attrs), ref)


def binary(op: str, ref: Callable) -> Row:
    a, b = special((3, 17), 2), special((3, 17), 3)
    b[0, :5] = a[0, :5][::-1]                      # inf - inf, inf * 0, NaN meets NaN ...
    return Row(op, [a, b], lambda g, x, y: getattr(g, op)(x, y), ref)


X4 = special((2, 4, 6, 6), 4)
# Parameters (weights, norm scales and biases) are finite, the activations carry the specials: an
# infinite weight times a padding zero is NaN under ONNX's explicit padding and skipped by torch's
# implicit one, and torch's fused norms compute x * (rstd * scale) + (bias - mean * rstd * scale),
# whose inf - inf gives NaN where the ONNX formula gives an infinity.
W4 = np.random.default_rng(5).standard_normal((5, 4, 3, 3)).astype(np.float32)


def finite(shape, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def no_infinities(x: np.ndarray) -> np.ndarray:
    """``x`` with its infinities replaced by 1 (NaN and -0.0 kept)."""
    return np.where(np.isinf(x), np.float32(1), x)

ROWS: list[Row] = [
    # elementwise
    unary("neg", torch.neg), unary("abs", torch.abs), unary("exp", torch.exp), unary("log", torch.log),
    unary("sqrt", torch.sqrt), unary("rsqrt", torch.rsqrt), unary("reciprocal", torch.reciprocal),
    unary("tanh", torch.tanh), unary("sigmoid", torch.sigmoid), unary("erf", torch.erf), unary("relu", torch.relu),
    unary("sin", torch.sin), unary("cos", torch.cos), unary("floor", torch.floor), unary("ceil", torch.ceil),
    unary("round", torch.round), unary("softplus", F.softplus), unary("silu", F.silu),
    unary("identity", lambda x: x), unary("asin", torch.asin), unary("acos", torch.acos), unary("atan", torch.atan),
    unary("sign", lambda x: torch.from_numpy(np.sign(x.numpy()))),        # ONNX: sign(NaN) = NaN
    # torch's AVX-512 float32 gelu returns NaN for +inf (its scalar and float64 paths give +inf,
    # as the formula and ONNX do): the reference is taken in float64
    unary("gelu", lambda x: F.gelu(x.double()).float()), Row("gelu", [special((3, 17), 6)], lambda g, x: g.gelu(x, approximate="tanh"),
                               lambda x: F.gelu(x, approximate="tanh")),
    unary("leaky_relu", lambda x: F.leaky_relu(x, 0.1), alpha=0.1), unary("elu", F.elu),
    unary("hard_sigmoid", lambda x: torch.clamp(0.2 * x + 0.5, 0, 1)),
    unary("clip", lambda x: torch.clamp(x, -0.5, 0.7), min=-0.5, max=0.7),
    binary("add", torch.add), binary("sub", torch.sub), binary("mul", torch.mul), binary("div", torch.div),
    binary("pow", torch.pow), binary("max", torch.maximum), binary("min", torch.minimum),
    # ONNX's (NumPy's) exact remainders: torch's vectorised fmod divides first, so a denormal
    # divisor overflows the quotient and gives NaN
    binary("mod", lambda a, b: torch.from_numpy(np.mod(a.numpy(), b.numpy()))),
    binary("fmod", lambda a, b: torch.from_numpy(np.fmod(a.numpy(), b.numpy()))),
    binary("eq", torch.eq), binary("ne", torch.ne), binary("lt", torch.lt), binary("le", torch.le),
    binary("gt", torch.gt), binary("ge", torch.ge),
    Row("select", [special((3, 17), 7) > 0, special((3, 17), 8), special((3, 17), 9)],
        lambda g, c, a, b: g.select(c, a, b), torch.where),
    Row("cast", [special((3, 17), 10)], lambda g, x: g.cast(x, dtype=DType.f64), lambda x: x.double()),
    Row("cast", [special((3, 17), 11)], lambda g, x: g.cast(x, dtype=DType.bool), lambda x: x.bool()),
    # reductions
    *[Row(op, [special((4, 9, 5), 12)], (lambda o: lambda g, x: getattr(g, o)(x, axes=(1,)))(op), ref, 1e-4)
      for op, ref in (("reduce_sum", lambda x: x.sum(1)), ("reduce_mean", lambda x: x.mean(1)),
                      ("reduce_max", lambda x: x.amax(1)), ("reduce_min", lambda x: x.amin(1)),
                      ("reduce_prod", lambda x: x.prod(1)))],
    Row("reduce_max", [special((3, 64), 13)], lambda g, x: g.reduce_max(x, axes=(1,)), lambda x: x.amax(1)),
    Row("reduce_min", [special((3, 64), 14)], lambda g, x: g.reduce_min(x, axes=(1,)), lambda x: x.amin(1)),
    Row("argmax", [special((4, 9), 15)], lambda g, x: g.argmax(x, axis=1), lambda x: x.argmax(1)),
    Row("argmin", [special((4, 9), 16)], lambda g, x: g.argmin(x, axis=1), lambda x: x.argmin(1)),
    Row("softmax", [special((4, 9), 17)], lambda g, x: g.softmax(x, axis=1), lambda x: x.softmax(1)),
    Row("log_softmax", [special((4, 9), 18)], lambda g, x: g.log_softmax(x, axis=1), lambda x: x.log_softmax(1)),
    Row("cumsum", [special((4, 9), 19)], lambda g, x: g.cumsum(x, axis=1), lambda x: x.cumsum(1), 1e-4),
    # normalisation
    Row("layer_norm", [special((4, 16), 20), finite((16,), 21), finite((16,), 22)],
        lambda g, x, s, b: g.layer_norm(x, s, b), lambda x, s, b: F.layer_norm(x, (16,), s, b), 1e-4),
    Row("batch_norm", [X4, *(finite((4,), 23 + i) for i in range(3)), np.abs(finite((4,), 26))],
        lambda g, x, s, b, m, v: g.batch_norm(x, s, b, m, v),
        lambda x, s, b, m, v: F.batch_norm(x, m, v, s, b, training=False), 1e-4),
    Row("group_norm", [X4, finite((4,), 27), finite((4,), 28)],
        lambda g, x, s, b: g.group_norm(x, s, b, num_groups=2), lambda x, s, b: F.group_norm(x, 2, s, b), 1e-4),
    Row("instance_norm", [X4, finite((4,), 29), finite((4,), 30)],
        lambda g, x, s, b: g.instance_norm(x, s, b), lambda x, s, b: F.instance_norm(x, weight=s, bias=b), 1e-4),
    # linear algebra, convolution, pooling, attention
    Row("matmul", [special((5, 7), 31), special((7, 6), 32)], lambda g, a, b: g.matmul(a, b), torch.matmul, 1e-4),
    Row("batch_matmul", [special((2, 5, 7), 33), special((2, 7, 6), 34)], lambda g, a, b: g.batch_matmul(a, b),
        torch.bmm, 1e-4),
    Row("gemm", [special((5, 7), 35), special((7, 6), 36), finite((6,), 37)], lambda g, a, b, c: g.gemm(a, b, c),
        lambda a, b, c: a @ b + c, 1e-4),
    Row("conv", [X4, W4, finite((5,), 38)], lambda g, x, w, b: g.conv(x, w, b, pads=(1, 1, 1, 1)),
        lambda x, w, b: F.conv2d(x, w, b, padding=1), 1e-4),
    Row("conv_transpose", [X4, finite((4, 3, 3, 3), 39)], lambda g, x, w: g.conv_transpose(x, w, strides=(2, 2)),
        lambda x, w: F.conv_transpose2d(x, w, stride=2), 1e-4),
    Row("max_pool", [X4], lambda g, x: g.max_pool(x, kernel=(2, 2), strides=(2, 2)), lambda x: F.max_pool2d(x, 2)),
    Row("avg_pool", [X4], lambda g, x: g.avg_pool(x, kernel=(2, 2), strides=(2, 2)), lambda x: F.avg_pool2d(x, 2)),
    Row("global_avg_pool", [X4], lambda g, x: g.global_avg_pool(x), lambda x: x.mean((2, 3), keepdim=True), 1e-4),
    Row("global_max_pool", [X4], lambda g, x: g.global_max_pool(x), lambda x: x.amax((2, 3), keepdim=True)),
    Row("attention", [special((2, 5, 8), 40), special((2, 6, 8), 41), special((2, 6, 8), 42)],
        lambda g, q, k, v: g.attention(q, k, v), F.scaled_dot_product_attention, 1e-4),
    # data movement: NaN positions move with the data
    unary("reshape", lambda x: x.reshape(17, 3), shape=(17, 3)),
    unary("transpose", lambda x: x.T, perm=(1, 0)),
    unary("flatten", lambda x: x.reshape(3, 17), axis=1),
    Row("squeeze", [special((3, 1, 17), 43)], lambda g, x: g.squeeze(x, axes=(1,)), lambda x: x.squeeze(1)),
    unary("unsqueeze", lambda x: x.unsqueeze(0), axes=(0,)),
    Row("expand", [special((3, 1), 44)], lambda g, x: g.expand(x, shape=(3, 4)), lambda x: x.expand(3, 4)),
    Row("concat", [special((3, 4), 45), special((3, 5), 46)], lambda g, a, b: g.concat(a, b, axis=1),
        lambda a, b: torch.cat([a, b], 1)),
    Row("split", [special((3, 8), 47)], lambda g, x: g.split(x, axis=1, sizes=(3, 5))[1],
        lambda x: x[:, 3:]),
    Row("slice", [special((3, 17), 48)], lambda g, x: g.slice(x, starts=(2,), ends=(15,), axes=(1,), steps=(3,)),
        lambda x: x[:, 2:15:3]),
    unary("pad", lambda x: F.pad(x, (1, 2), value=float("nan")), pads=(0, 1, 0, 2), value=math.nan),
    unary("tile", lambda x: x.repeat(2, 1), repeats=(2, 1)),
    Row("gather", [special((5, 4), 49), np.array([4, 0, 2], np.int64)], lambda g, x, i: g.gather(x, i, axis=0),
        lambda x, i: x[i]),
    Row("gather_elements", [special((3, 4), 50), np.array([[3, 0, 1, 1]] * 3, np.int64)],
        lambda g, x, i: g.gather_elements(x, i, axis=1), lambda x, i: torch.gather(x, 1, i)),
    Row("embedding", [special((6, 4), 51), np.array([[5, 0], [3, 3]], np.int64)],
        lambda g, t, i: g.embedding(t, i), lambda t, i: F.embedding(i, t)),
    # torch interpolates as x0 + w (x1 - x0), ONNX as the weighted sum: with an infinity in the
    # window the two put NaN in different places (NaN itself lands alike)
    Row("resize", [no_infinities(X4)], lambda g, x: g.resize(x, sizes=(2, 4, 12, 12), mode="linear"),
        lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False), 1e-4),
    Row("topk", [special((3, 17), 52)], lambda g, x: g.topk(x, k=4)[0], lambda x: x.topk(4).values),
    Row("topk", [special((3, 17), 53)], lambda g, x: g.topk(x, k=4, largest=False)[0],
        lambda x: x.topk(4, largest=False).values),
    Row("scatter_nd", [special((5, 4), 54), np.array([[3], [0]], np.int64), special((2, 4), 55)],
        lambda g, d, i, u: g.scatter_nd(d, i, u, reduction="max"),
        lambda d, i, u: d.index_reduce(0, i[:, 0], u, "amax", include_self=True)),
    Row("grid_sample", [no_infinities(X4), finite((2, 5, 5, 2), 56).clip(-1.1, 1.1)],
        lambda g, x, grid: g.grid_sample(x, grid), lambda x, grid: F.grid_sample(x, grid, align_corners=False), 1e-4),
]

# Graph ops without a row, and why.  Everything else must have a row.
NOT_IN_TABLE = {
    "constant": "no float input", "qmatmul": "8-bit integer operands only", "qconv": "8-bit integer activations, or float32 through input_scale: a QuantizeLinear taken in, whose NaN input has no defined uint8 (as ONNX), its epilogue scale/bias/residual are finite constants or the model's own float path", "bf16_matmul": "made only by precision=bf16; its NaN/inf cases are test_bf16gemm.py's", "bf16_conv": "made only by precision=bf16; the same vdpbf16ps chain as bf16_matmul (test_bf16gemm.py), its residual's NaN/inf through the epilogue in test_bf16conv.py", "iota": "no float input", "shape_of": "reads only the shape",
    "one_hot": "integer input", "and": "bool inputs", "or": "bool inputs", "xor": "bool inputs",
    "not": "bool input", "bitwise_and": "integer inputs", "bitwise_or": "integer inputs",
    "bitwise_xor": "integer inputs", "bitwise_not": "integer input",
    "bitcast": "reinterprets bits: a NaN's bits are kept as they are",
    "if": "control flow: no arithmetic of its own; its bodies' ops have rows",
    "loop": "control flow: no arithmetic of its own; its bodies' ops have rows",
    "scan": "control flow: no arithmetic of its own; its bodies' ops have rows",
    "yield": "region terminator",
    "nonzero": "data-dependent size: test_data_dependent_ops_on_special_values",
    "compress": "data-dependent size: test_data_dependent_ops_on_special_values",
    "unique": "data-dependent size: test_data_dependent_ops_on_special_values",
    "non_max_suppression": "ONNX leaves NaN boxes and scores undefined",
    "roi_align": "library kernel at data-dependent sample points; ONNX's reference max mode is Python max "
                 "(NaN order-dependent): values checked in tests/frontends/test_onnx_sampling_ops.py",
    "deform_conv": "library kernel at data-dependent sample points (no torch reference here): values "
                   "checked in tests/frontends/test_onnx_sampling_ops.py",
    "layout_transform": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
    "conv_nchwc": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
    "mbconv_nchwc": "blocked-layout op made by the layout pass: NaN and Inf checked in "
                    "tests/codegen/test_nchwc_mbconv.py",
    "max_pool_nchwc": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
    "avg_pool_nchwc": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
    "global_avg_pool_nchwc": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
    "global_max_pool_nchwc": "blocked-layout op made by the layout pass: test_blocked_layout_ops_on_special_values",
}


def test_every_graph_op_is_in_the_table():
    import tensorforge.dialects.graph  # noqa: F401
    ops = {n.split(".", 1)[1] for n in opdef.registered_ops() if n.startswith("graph.")}
    covered = {r.op for r in ROWS} | set(NOT_IN_TABLE)
    assert not ops - covered, f"graph ops with no NaN/Inf row and no reason: {sorted(ops - covered)}"


def assert_same_specials(got: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    """NaN exactly where ``want`` has NaN; infinities equal; finite values within ``tol``
    relative to the larger of 1 and the reference's largest finite magnitude."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    got = got.astype(np.float64)
    want = want.astype(np.float64)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    assert np.array_equal(nan_got, nan_want), (
        f"{what}: NaN at {np.argwhere(nan_got & ~nan_want).tolist()} where the reference has none, "
        f"missing at {np.argwhere(nan_want & ~nan_got).tolist()}")
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=f"{what}: infinities differ")
    finite = np.isfinite(want)
    scale = max(1.0, float(np.abs(want[finite]).max())) if finite.any() else 1.0
    np.testing.assert_allclose(got[finite], want[finite], rtol=tol, atol=tol * scale, err_msg=what)


def _module(rows: list[Row]) -> Module:
    m = Module()
    types = [tensor(a.shape, DType.from_np(a.dtype)) for r in rows for a in r.inputs]
    f = m.add_function("main", types)
    g = f.builder().graph
    args, outs = list(f.args), []
    for r in rows:
        mine, args = args[:len(r.inputs)], args[len(r.inputs):]
        outs.append(r.build(g, *mine))
    f.set_return(outs)
    return m


_REDUCTIONS_AND_NORMS = {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
                         "softmax", "log_softmax", "cumsum", "layer_norm", "batch_norm", "group_norm",
                         "instance_norm"}
_CONTRACTIONS_AND_POOLS = {"matmul", "batch_matmul", "gemm", "conv", "conv_transpose", "max_pool", "avg_pool",
                           "global_avg_pool", "global_max_pool", "attention"}
_DATA_MOVEMENT = {"reshape", "transpose", "flatten", "squeeze", "unsqueeze", "expand", "concat", "split", "slice",
                  "pad", "tile", "gather", "gather_elements", "embedding", "resize", "topk", "scatter_nd",
                  "grid_sample"}


def _group(op: str) -> str:
    for name, ops in (("reductions_and_norms", _REDUCTIONS_AND_NORMS),
                      ("contractions_and_pools", _CONTRACTIONS_AND_POOLS), ("data_movement", _DATA_MOVEMENT)):
        if op in ops:
            return name
    return "elementwise"


GROUPS: dict[str, list[Row]] = {}
for _row in ROWS:
    GROUPS.setdefault(_group(_row.op), []).append(_row)


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_nan_inf_table(group: str, target: str):
    rows = GROUPS[group]
    cm = tensorforge.compile(_module(rows), target=target)
    outs = cm(*[a for r in rows for a in r.inputs])
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    failures = []
    for r, got in zip(rows, outs):
        want = r.ref(*[torch.from_numpy(np.array(a)) for a in r.inputs]).numpy()
        try:
            assert_same_specials(got, want, r.tol, f"graph.{r.op}")
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])
    assert not failures, "\n".join(failures)


def test_fast_math_is_an_explicit_opt_in():
    """The old behaviour stays available: -ffast-math drops the NaN of a max reduction."""
    m = _module([Row("reduce_max", [special((3, 64), 13)], lambda g, x: g.reduce_max(x, axes=(1,)), None)])
    x = special((3, 64), 13)
    ieee = tensorforge.compile(m)(x)
    assert np.isnan(ieee[0])
    fast = tensorforge.compile(m, fast_math=True)
    assert "-ffast-math" in fast.native.build["target"]["flags"]
    assert "-ffast-math" not in tensorforge.compile(m).native.build["target"]["flags"]


def test_blocked_layout_ops_on_special_values():
    """The layout pass's blocked ops (NCHW[x]c convolution and pools, layout transforms) on NaN/Inf.
    They have no native lowering yet (the pass is off by default), so this checks their reference."""
    from tensorforge.passes.pipeline import default_pipeline_text, optimize
    x, w = special((1, 16, 6, 6), 58), finite((16, 16, 3, 3), 59)
    m = Module()
    f = m.add_function("main", [tensor(x.shape)])
    g = f.builder().graph
    y = g.conv(f.args[0], g.constant(w), pads=(1, 1, 1, 1))
    f.set_return([g.max_pool(y, kernel=(2, 2), strides=(2, 2)), g.avg_pool(y, kernel=(2, 2), strides=(2, 2)),
                  g.global_avg_pool(y), g.global_max_pool(y)])
    passes = default_pipeline_text(layout=True)
    module = m.clone()
    optimize(module, "cpu", passes)
    blocked = {op.name for op in module.main.walk()}
    assert {"graph.conv_nchwc", "graph.layout_transform"} <= blocked, sorted(blocked)
    outs = tensorforge.compile(m, passes=passes, target="interpreter")(x)
    y_ref = F.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1)
    refs = [F.max_pool2d(y_ref, 2), F.avg_pool2d(y_ref, 2), y_ref.mean((2, 3), keepdim=True),
            y_ref.amax((2, 3), keepdim=True)]
    for got, want, what in zip(outs, refs, ("max_pool", "avg_pool", "global_avg_pool", "global_max_pool")):
        assert_same_specials(got, want.numpy(), 1e-4, f"blocked {what}")


@pytest.mark.parametrize("target", ["cpu", "interpreter"])
def test_data_dependent_ops_on_special_values(target: str):
    """NonZero (NaN and -0.0: NaN is nonzero, -0.0 is zero), Compress and Unique (NumPy's: one
    NaN) through the ONNX frontend, against NumPy as ONNX's reference defines them."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = special((4, 5), 57)
    x.reshape(-1)[[1, 2]] = [np.nan, -0.0]
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Compress", ["x", "c"], ["cp"], axis=1),
             helper.make_node("Unique", ["x"], ["u"], sorted=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                           helper.make_tensor_value_info("c", TensorProto.BOOL, (5,))],
                              [helper.make_tensor_value_info(n, t, None) for n, t in
                               (("nz", TensorProto.INT64), ("cp", TensorProto.FLOAT), ("u", TensorProto.FLOAT))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    cond = np.array([True, False, True, True, False])
    nz, cp, u = tensorforge.compile(model, target=target)(x, cond)
    np.testing.assert_array_equal(nz, np.array(np.nonzero(x)))
    assert_same_specials(cp, np.compress(cond, x, axis=1), 0, "Compress")
    assert_same_specials(u, np.unique(x), 0, "Unique")


class _IssueModule(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1, torch.softmax(x, -1), x.max(-1).values


def test_a_torch_module_fed_nan_and_infinities_matches_eager():
    """The case that opened issue 14: relu(x) + 1, softmax and max on a row with NaN and +-Inf,
    through ``tensorforge.compile`` of a torch module and a call with torch tensors."""
    x = torch.tensor([[1.0, float("nan"), float("inf"), -float("inf"), 3.0, -0.0, 2.0, 0.5],
                      [1.0, 2.0, float("inf"), 0.0, -1.0, 3.0, 2.0, 0.5]])
    module = _IssueModule().eval()
    cm = tensorforge.compile(module, (x,))
    for got, want, what in zip(cm(x), module(x), ("relu + 1", "softmax", "max")):
        assert_same_specials(np.asarray(got), want.numpy(), 1e-6, what)
