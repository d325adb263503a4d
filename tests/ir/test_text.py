"""The IR text format: print -> parse round trips, mlir-opt acceptance, error messages."""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorforge.errors import ParseError, TensorforgeError, VerificationError
from tensorforge.ir import (COMMUTATIVE, ELEMENTWISE, PURE, TERMINATOR, BufferType, Dense, DType,
                            FunctionType, IndexType, Module, ModuleOp, OpDef, make_op,
                            register, registered_ops, tensor)
from tensorforge.ir.core import Block, Region
from tensorforge.ir.parser import load_module, parse_module, save_module
from tensorforge.ir.printer import print_module
from tensorforge.ir.structure import structural_diff, structural_hash


# ---- test-only ops: a multi-result op and a non-isolated op with a region ------------------
@register
class _Pair(OpDef):
    name = "testtext.pair"
    operands = ("x",)
    results = ("a", "b")
    traits = frozenset({PURE})

    def infer(self, types, attrs):
        return [types[0], types[0]]


@register
class _Map(OpDef):
    name = "testtext.map"
    operands = ("x",)

    def infer(self, types, attrs):
        return [types[0]]


@register
class _Yield(OpDef):
    name = "testtext.yield"
    operands = ("values*",)
    results = ()
    traits = frozenset({TERMINATOR})


def _mlir_opt() -> str | None:
    for cand in ("mlir-opt-19", "/usr/lib/llvm-19/bin/mlir-opt"):
        path = shutil.which(cand) or (cand if os.path.isfile(cand) else None)
        if path:
            return path
    return None


MLIR_OPT = _mlir_opt()


@pytest.fixture
def ieee_subnormals():
    """Exact float round trips need IEEE subnormals; a shared library linked with -ffast-math
    (crtfastmath.o) sets FTZ/DAZ for the whole process when it is loaded, and then even
    ``float("5e-324")`` is 0.0.  Say so instead of failing with a puzzling '0.0 vs 0.0'."""
    if float("5e-324") == 0.0:
        pytest.fail("this process flushes subnormal floats to zero (FTZ/DAZ): a native library built "
                    "with -ffast-math at link time was loaded by an earlier test")


def roundtrip(m, **print_kw):
    """parse(print(m)) is structurally equal to m, hashes equal, and printing again is a fixpoint."""
    resources = print_kw.pop("resources", None)
    text = print_module(m, resources=resources, **print_kw)
    back = parse_module(text, resources)
    diff = structural_diff(m, back)
    assert diff is None, diff
    assert structural_hash(back) == structural_hash(m)
    again = {} if resources is not None else None
    assert print_module(back, resources=again, **print_kw) == text
    return text, back


def mlir_accepts(text: str, tmp_path) -> str:
    """Runs the real mlir-opt on ``text``; returns its generic-form output."""
    if MLIR_OPT is None:
        pytest.skip("mlir-opt-19 is not installed")
    path = tmp_path / "in.mlir"
    path.write_text(text)
    r = subprocess.run([MLIR_OPT, "--allow-unregistered-dialect", "--mlir-print-op-generic", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[:2000]
    return r.stdout


# ---- modules under test ------------------------------------------------------------------
ODD_FLOATS = [0.1, -0.0, 0.0, 1e-300, 5e-324, 1.7976931348623157e308, math.inf, -math.inf, math.nan,
              1e16, 123456789.125, -2.5e-7]


def every_attribute_module() -> ModuleOp:
    """One op carrying every attribute kind (discardable ``tf.*`` attributes take any value)."""
    m = Module()
    f = m.add_function("main", [tensor(("N", 8))])
    attrs = {
        "tf.true": True, "tf.false": False,
        "tf.int": 5, "tf.neg": -7, "tf.big": 2**63 - 1, "tf.small": -(2**63),
        "tf.str": "plain", "tf.empty_str": "", "tf.esc": 'quote " back \\ nl \n tab \t bell \x07 € 字',
        "tf.ints": (1, -2, 3), "tf.no_ints": (), "tf.floats": (1.5, -0.0, math.inf, math.nan),
        "tf.dims": (1, "N", 3), "tf.bools": (True, False), "tf.strs": ("a", "b c"),
        "tf.nested": ((1, 2), (), (0.5,), ("x", 2.0)), "tf.mixed": (1, 1.0, True),
        "tf.dtype": DType.bf16, "tf.u8": DType.u8, "tf.i1": DType.bool,
        "tf.tensor": tensor(("B", 3, "S"), "f16"), "tf.memref": BufferType((4, "M"), DType.i32),
        "tf.index": IndexType(), "tf.fn": FunctionType([tensor((2,)), IndexType()], [tensor((3,), "i64")]),
        "tf.nofn": FunctionType([], []),
        "tf.quoted key": 1,
    }
    for i, x in enumerate(ODD_FLOATS):
        attrs[f"tf.f{i}"] = x
    b = f.builder()
    y = b.create("graph.identity", [f.args[0]], attrs).result
    f.set_return([y])
    return m


def constants_module(rng, large_elements_hint: int = 64) -> ModuleOp:
    """Constants of every dtype: splat, scalar, empty, literal, hex (medium) and resource (large)."""
    m = Module()
    f = m.add_function("main", [])
    g = f.builder().graph
    outs = []
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 1e-30, 3.4028235e38, 0.1, 1.0], dtype=np.float32)
    arrays = [
        np.float32(1.5), np.zeros((3, 2), np.float32), np.full((4,), -0.0, np.float32),
        np.zeros((0,), np.float32), np.zeros((2, 0, 3), np.int64),
        np.array([0.0, -0.0, 0.0], np.float32),                                  # == but not a splat
        np.array([0x7FC00000, 0x7FC00001, 0x7FC00000], np.uint32).view(np.float32),  # NaN payloads
        special, special.reshape(2, 4).astype(np.float64),
        np.array([np.inf, -np.inf, np.nan, -0.0, 6e-8, 65504, 0.1, 1], np.float16),
        np.array([np.nan, 1.0, 2.0], np.float64),
        rng.standard_normal((3, 5)).astype(np.float32),
        rng.standard_normal((2, 3)), rng.standard_normal((7,)).astype(np.float16),
        rng.integers(-128, 127, (2, 3, 4)).astype(np.int8), rng.integers(0, 255, (9,)).astype(np.uint8),
        rng.integers(-2**31, 2**31 - 1, (5,)).astype(np.int32),
        np.array([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0], np.int64),
        rng.integers(-30000, 30000, (3,)).astype(np.int16),
        np.array([[True, False, True]]), np.ones((4, 4), np.bool_), rng.random((70,)) > 0.5,
        # medium: printed as hex
        rng.standard_normal((5, 12)).astype(np.float32), rng.integers(-9, 9, (20, 2)).astype(np.int64),
        rng.standard_normal((33,)).astype(np.float16),
        np.concatenate([special, rng.standard_normal(40).astype(np.float32)]),
        # large: dense_resource
        rng.standard_normal((32, 64)).astype(np.float32), rng.integers(-9, 9, (300,)).astype(np.int32),
        rng.standard_normal((10, 11)), rng.random((200,)) > 0.5,
    ]
    for a in arrays:
        outs.append(g.constant(a))
    # bf16 (held as f32): values that bf16 represents exactly, plus a large one
    bf = np.array([1.0, -2.5, 0.15625, np.inf, np.nan, 65280.0], np.float32)
    outs.append(g.constant(Dense(bf, DType.bf16)))
    bf_big = (rng.integers(-100, 100, (300,)) / 8).astype(np.float32)
    outs.append(g.constant(Dense(bf_big, DType.bf16)))
    f.set_return(outs)
    return m


def region_module() -> ModuleOp:
    """Two functions, a multi-result op, a nested region using outer values, an empty function."""
    m = Module()
    f = m.add_function("main", [tensor((4, 8)), tensor((4, 8))])
    b = f.builder()
    a, c = b.testtext.pair(f.args[0])
    s = b.graph.add(a, f.args[1])
    region = Region([Block([tensor((4, 8))])])
    inner = region.blocks[0]
    t = make_op("graph.mul", [inner.args[0], c])
    inner.append(t)
    inner.append(make_op("testtext.yield", [t.result]))
    mapped = b.insert(make_op("testtext.map", [s], regions=[region])).result
    d, e = b.testtext.pair(mapped)
    b.insert(make_op("testtext.map", [d], regions=[Region([Block()])]))     # one empty block
    b.insert(make_op("testtext.map", [d], regions=[Region([])]))            # no block at all
    f.set_return([e, d, a])
    m.add_function("empty", []).set_return([])
    h = m.add_function("other", [tensor(("N",), "i64")])
    h.set_return([h.builder().graph.neg(h.args[0])])
    return m


# ---- round trips ---------------------------------------------------------------------------
def test_every_attribute_kind_round_trips(ieee_subnormals):
    text, _ = roundtrip(every_attribute_module())
    assert 'tensor<?x8xf32, "N">' in text
    assert "array<i64: 1, -2, 3>" in text and "array<i64>" in text
    assert "tf.f6 = 0x7FF0000000000000 : f64" in text      # inf as IEEE bits
    assert "tf.int = 5 : i64" in text and "tf.true = true" in text
    assert "tf.fn = (tensor<2xf32>, index) -> (tensor<3xi64>)" in text


def test_generic_syntax_shape():
    m = Module()
    f = m.add_function("main", [tensor((4, 8)), tensor((4, 8))])
    f.set_return([f.builder().graph.add(f.args[0], f.args[1])])
    text = print_module(m)
    assert '%0 = "graph.add"(%arg0, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>' in text
    assert text.startswith('"builtin.module"() ({\n  "func.func"() ({\n  ^bb0(%arg0: tensor<4x8xf32>, ')
    assert str(m) == text


def test_constants_of_every_dtype_round_trip(rng):
    m = constants_module(rng)
    res: dict = {}
    text, back = roundtrip(m, resources=res)
    assert len(res) == 6 and all(k.startswith("tf_") for k in res)
    assert "dense<1.5> : tensor<f32>" in text and "dense<0.0> : tensor<3x2xf32>" in text
    assert "dense<> : tensor<0xf32>" in text and "dense<-0.0> : tensor<4xf32>" in text
    assert 'dense<"0x' in text and "0x7F800000" in text and "0x7FC0" in text
    assert "dense<[[true, false, true]]> : tensor<1x3xi1>" in text
    # values, bit for bit (NaN payloads and -0.0 included)
    for x, y in zip(m.main.outputs, back.main.outputs):
        ax, ay = x.op.attributes["value"].array, y.op.attributes["value"].array
        assert ax.dtype == ay.dtype and ax.shape == ay.shape
        assert ax.tobytes() == ay.tobytes()


def test_large_constants_inline_trailer(rng):
    m = constants_module(rng)
    text, back = roundtrip(m, inline_resources=True)
    assert text.rstrip().endswith("#-}") and "dialect_resources" in text
    # blob = 4-byte little-endian alignment + raw data
    w = rng.standard_normal((32, 64)).astype(np.float32)
    m2 = Module()
    f = m2.add_function("main", [])
    f.set_return([f.builder().graph.constant(w)])
    text2 = print_module(m2, inline_resources=True)
    blob = re.search(r'tf_[0-9a-f]+: "0x([0-9a-fA-F]+)"', text2).group(1)
    assert blob[:8] == "04000000" and bytes.fromhex(blob[8:]) == w.tobytes()
    got = parse_module(text2).main.outputs[0].op.attributes["value"].array
    np.testing.assert_array_equal(got, w)


def test_large_constants_threshold_and_display_only(rng):
    m = constants_module(rng)
    assert "dense_resource" not in print_module(m, large_elements=10**9)
    roundtrip(m, large_elements=10**9)
    res: dict = {}
    roundtrip(m, resources=res, large_elements=4)
    assert len(res) > 6
    shown = print_module(m)          # no resources dict, no trailer: the handles only
    assert "dense_resource<tf_" in shown and "{-#" not in shown
    with pytest.raises(ParseError, match="missing resource"):
        parse_module(shown)


def test_resource_names_are_stable_and_shared(rng):
    w = rng.standard_normal((100,)).astype(np.float32)
    m = Module()
    f = m.add_function("main", [])
    g = f.builder().graph
    f.set_return([g.constant(w), g.constant(w.copy())])
    res: dict = {}
    text = print_module(m, resources=res)
    assert len(res) == 1 and text.count(next(iter(res))) == 2
    back = parse_module(text, res)
    c0, c1 = (v.op.attributes["value"] for v in back.main.outputs)
    assert c0 is c1                              # one Dense per resource, not one per use
    assert print_module(back, resources={}) == text


def test_multi_result_regions_and_functions_round_trip():
    text, back = roundtrip(region_module())
    assert '%0:2 = "testtext.pair"(%arg0)' in text and '"graph.add"(%0#0, %arg1)' in text
    assert '"graph.mul"(%arg2, %0#1)' in text              # nested region uses an outer value
    assert "({\n    ^bb0:\n    })" in text and "({\n    })" in text  # an empty block keeps its label
    assert [f.sym_name for f in back.functions] == ["main", "empty", "other"]


def test_function_input_and_output_names_survive(tmp_path):
    """The runtime names a model's inputs/outputs after these hints: they must survive text."""
    m = Module()
    f = m.add_function("main", [tensor((2,)), tensor((2,))], arg_names=["image", "mask/0"])
    y = f.builder().graph.mul(f.args[0], f.args[1])
    y.name_hint = "logits"
    f.set_return([y, f.args[0]])
    text, back = roundtrip(m)
    assert 'tf.arg_names = ["image", "mask/0"], tf.result_names = ["logits", "image"]' in text
    assert [a.name_hint for a in back.main.args] == ["image", "mask/0"]
    assert [v.name_hint for v in back.main.outputs] == ["logits", "image"]
    assert "tf.arg_names" not in back.main.attributes
    bad = text.replace('["image", "mask/0"]', '["image"]')
    with pytest.raises(ParseError, match=r"^<text>:2:3: 'tf.arg_names' must list one name .* per argument \(2\)$"):
        parse_module(bad)
    assert structural_diff(m, parse_module(mlir_accepts(text, tmp_path))) is None


def test_save_and_load(tmp_path, rng):
    m = constants_module(rng)
    path = tmp_path / "model.mlir"
    save_module(m, path)
    assert (tmp_path / "model.mlir.npz").exists()
    assert os.path.getsize(path) < 40_000
    assert structural_diff(m, load_module(path)) is None
    small = region_module()
    save_module(small, path)                     # no large constants: the stale sidecar goes
    assert not (tmp_path / "model.mlir.npz").exists()
    assert structural_diff(small, load_module(path)) is None


def test_lowered_levels_round_trip():
    """Structured kernels and loop functions (index, scalars, memrefs) print and parse back."""
    lower = pytest.importorskip("tensorforge.passes.lower.graph_to_kernels")
    to_loop = pytest.importorskip("tensorforge.passes.lower.structured_to_loop")
    rng = np.random.default_rng(1)
    m = Module()
    f = m.add_function("main", [tensor((7, 5))])
    g = f.builder().graph
    y = g.gemm(f.args[0], g.constant(rng.standard_normal((3, 7)).astype(np.float32)),
               g.constant(rng.standard_normal(3).astype(np.float32)), trans_a=True, trans_b=True, alpha=0.5)
    f.set_return([g.relu(y)])
    lower.lower_module(m)
    roundtrip(m)
    loops = Module()
    for k in [o for o in m.main.body if o.name == "structured.kernel"]:
        loops.body.append(to_loop.lower_kernel(k))
    text, _ = roundtrip(loops)
    assert "memref<5x3xf32>" in text and "index" in text and "type = f32" in text


def test_parses_mlir_opt_style_input():
    """What mlir-opt writes back: properties <{...}>, untyped list elements, e+00 floats, \\22 escapes."""
    text = '''"builtin.module"() ({
  "func.func"() <{function_type = (tensor<2xf32>) -> tensor<2xf32>, sym_name = "main"}> ({
  ^bb0(%arg0: tensor<2xf32>):
    %0 = "graph.leaky_relu"(%arg0) {alpha = 1.000000e-01 : f64, tf.l = [1, 2.500000e+00, "a\\22b"]} : (tensor<2xf32>) -> tensor<2xf32>
    %c = "graph.constant"() {value = dense<"0x0000803F"> : tensor<2xf32>} : () -> tensor<2xf32>
    %1 = "graph.add"(%0, %c) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>  // a comment
    "func.return"(%1) : (tensor<2xf32>) -> ()
  }) : () -> ()
}) : () -> ()
'''
    m = parse_module(text)
    lrelu = m.main.body.first
    assert lrelu.attributes["alpha"] == 0.1 and lrelu.attributes["tf.l"] == (1, 2.5, 'a"b')
    np.testing.assert_array_equal(m.main.body.first.next.attributes["value"].array, [1.0, 1.0])


def test_bare_function_is_wrapped_in_a_module():
    text = '''"func.func"() ({
^bb0(%arg0: tensor<3xf32>):
  "func.return"(%arg0) : (tensor<3xf32>) -> ()
}) {function_type = (tensor<3xf32>) -> (tensor<3xf32>), sym_name = "id"} : () -> ()
'''
    m = parse_module(text)
    assert isinstance(m, ModuleOp) and m.main.sym_name == "id"
    assert isinstance(parse_module(""), ModuleOp) and len(parse_module("").body) == 0


def test_locations_point_at_the_op():
    m = parse_module(print_module(region_module()), source="r.mlir")
    add = [o for o in m.main.body if o.name == "graph.add"][0]
    assert add.loc == "r.mlir:5:5"


# ---- property test: random graphs of the registered elementwise ops -------------------------
def _elementwise_ops():
    ops = []
    for name, d in sorted(registered_ops("graph").items()):
        lo, hi = d.operand_range()
        if ELEMENTWISE in d.traits and lo == hi and lo in (1, 2) and not any(a.required for a in d.attrs.values()):
            ops.append((name, lo, {k: a.kind for k, a in d.attrs.items()}))
    return ops


ELEMENTWISE_OPS = _elementwise_ops()
_float_attr = st.floats(allow_nan=True, allow_infinity=True, width=64)


@st.composite
def random_graphs(draw):
    m = Module()
    args = [tensor((4, 8)), tensor((1, 8)), tensor(("N", 8)), tensor((8,), "i32")]   # broadcasting, symbols, ints
    f = m.add_function("main", args)
    b = f.builder()
    pool = list(f.args)
    for _ in range(draw(st.integers(1, 14))):
        choice = draw(st.integers(0, 9))
        if choice == 0:       # a constant: small literal, medium hex or large resource
            shape = draw(st.sampled_from([(), (3,), (1, 8), (9, 8), (25, 8)]))
            data = draw(st.lists(_float_attr, min_size=1, max_size=4))
            with np.errstate(over="ignore"):
                arr = np.resize(np.array(data, np.float32), shape)
            pool.append(b.graph.constant(arr))
            continue
        name, arity, attr_kinds = draw(st.sampled_from(ELEMENTWISE_OPS))
        operands = [draw(st.sampled_from(pool)) for _ in range(arity)]
        attrs = {k: draw(_float_attr) for k, kind in attr_kinds.items() if kind == "float" and draw(st.booleans())}
        try:
            op = b.create(name, operands, attrs)
        except TensorforgeError:
            continue          # dtype/shape combination the op rejects
        pool.extend(op.results)
    outs = draw(st.lists(st.sampled_from(pool[len(args):] or pool), min_size=1, max_size=3))
    f.set_return(outs)
    return m


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(random_graphs(), st.sampled_from(["dict", "inline"]))
def test_random_graphs_round_trip(ieee_subnormals, m, mode):
    if mode == "dict":
        roundtrip(m, resources={})
    else:
        roundtrip(m, inline_resources=True)


def test_random_graph_ops_cover_binary_and_unary():
    names = {n for n, _, _ in ELEMENTWISE_OPS}
    assert {"graph.add", "graph.relu", "graph.leaky_relu", "graph.lt"} <= names
    assert any(COMMUTATIVE in registered_ops("graph")[n].traits for n in names)


# ---- the real mlir-opt accepts what we print ----------------------------------------------
@pytest.mark.parametrize("build", ["attributes", "constants", "regions"])
def test_mlir_opt_accepts_and_reads_back(build, tmp_path, rng, ieee_subnormals):
    m = {"attributes": every_attribute_module, "constants": lambda: constants_module(rng),
         "regions": region_module}[build]()
    out = mlir_accepts(print_module(m, inline_resources=True), tmp_path)
    back = parse_module(out)            # mlir-opt's own generic output parses back to the same IR
    diff = structural_diff(m, back)
    assert diff is None, diff


def test_mlir_opt_accepts_lowered_levels(tmp_path):
    lower = pytest.importorskip("tensorforge.passes.lower.graph_to_kernels")
    m = Module()
    f = m.add_function("main", [tensor((3, 4)), tensor((4, 2))])
    g = f.builder().graph
    f.set_return([g.sigmoid(g.matmul(f.args[0], f.args[1]))])
    lower.lower_module(m)
    back = parse_module(mlir_accepts(print_module(m), tmp_path))
    assert structural_diff(m, back) is None


# ---- malformed text: one-line errors with line:col ----------------------------------------
GOOD = '''"builtin.module"() ({
  "func.func"() ({
  ^bb0(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>):
    %0 = "graph.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %1 = "graph.leaky_relu"(%0) {alpha = 0.5 : f64} : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%1) : (tensor<4xf32>) -> ()
  }) {function_type = (tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>), sym_name = "main"} : () -> ()
}) : () -> ()
'''
ADD = '%0 = "graph.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>'
LRELU = '%1 = "graph.leaky_relu"(%0) {alpha = 0.5 : f64} : (tensor<4xf32>) -> tensor<4xf32>'
RET = '"func.return"(%1) : (tensor<4xf32>) -> ()'

BAD_CASES = {
    # name: (old, new, error type, "line:col", message fragment)
    "unknown op": (ADD, ADD.replace("graph.add", "graph.plus"), ParseError, "4:10", "unknown op 'graph.plus'"),
    "undefined value": (ADD, ADD.replace("%arg1)", "%arg7)"), ParseError, "4:29", "undefined value '%arg7'"),
    "use before definition": (LRELU, LRELU.replace("(%0)", "(%1)"), ParseError, "5:29", "undefined value '%1'"),
    "redefined value": (LRELU, LRELU.replace("%1 =", "%0 ="), ParseError, "5:5", "redefinition of value '%0'"),
    "operand type": (ADD, ADD.replace("(tensor<4xf32>, tensor<4xf32>) ->", "(tensor<4xf32>, tensor<8xf32>) ->"),
                     ParseError, "4:29", "operand #1 of 'graph.add' has type tensor<4xf32>"),
    "result type": (ADD + "\n    " + LRELU, ADD.replace("-> tensor<4xf32>", "-> tensor<4xi32>") + "\n    "
                    + LRELU.replace("(tensor<4xf32>) ->", "(tensor<4xi32>) ->"),
                    VerificationError, "4:5", "result #0 has type tensor<4xi32> but its operands give tensor<4xf32>"),
    "unknown element type": (ADD, ADD.replace("-> tensor<4xf32>", "-> tensor<4xf33>"), ParseError, "4:72",
                             "unknown element type 'f33'"),
    "unnamed dynamic dim": (ADD, ADD.replace("-> tensor<4xf32>", "-> tensor<?xf32>"), ParseError, "4:72",
                            "has no symbol name"),
    "bad attribute kind": (LRELU, LRELU.replace("0.5 : f64", '"half"'), ParseError, "5:5",
                           "attribute 'alpha' = 'half'"),
    "bad attribute token": (LRELU, LRELU.replace("0.5 : f64", "half"), ParseError, "5:42",
                            "unknown attribute value 'half'"),
    "unknown attribute": (LRELU, LRELU.replace("alpha", "beta"), ParseError, "5:5", "unknown attribute 'beta'"),
    "result count": (ADD, ADD.replace("%0 =", "%0:2 ="), ParseError, "4:5", "defines 1 results but 2 are named"),
    "bad multi-result use": (LRELU, LRELU.replace("(%0)", "(%0#1)"), ParseError, "5:29", "has only 1 result"),
    "return type": (RET, RET.replace("(tensor<4xf32>) ->", "(tensor<4xi64>) ->"), ParseError, "6:19",
                    "operand #0 of 'func.return' has type tensor<4xf32> but the op's type says tensor<4xi64>"),
    "missing close": (RET, RET.replace(") -> ()", " -> ()"), ParseError, "6:40", "expected ',' or ')'"),
    "stray character": (ADD, ADD + " $", ParseError, "4:86", "unexpected character '$'"),
    "bad escape": (LRELU, LRELU.replace("alpha = 0.5 : f64", 'tf.s = "a\\qb"'), ParseError, "5:41", "bad escape"),
    "missing resource": (LRELU, LRELU.replace("alpha = 0.5 : f64", "tf.w = dense_resource<nope> : tensor<99xf32>"),
                         ParseError, "5:56", "missing resource 'nope'"),
    "dense shape": (LRELU, LRELU.replace("alpha = 0.5 : f64", "tf.d = dense<[1.0, 2.0]> : tensor<3xf32>"),
                    ParseError, "5:41", "dense literal has shape (2,)"),
    "dense overflow": (LRELU, LRELU.replace("alpha = 0.5 : f64", "tf.d = dense<[1, 300]> : tensor<2xi8>"),
                       ParseError, "5:51", "'300' is not a valid i8 value"),
    "dense hex length": (LRELU, LRELU.replace("alpha = 0.5 : f64", 'tf.d = dense<"0x0000803F00"> : tensor<2xf32>'),
                         ParseError, "5:41", "hex data has 5 bytes"),
    "ragged dense": (LRELU, LRELU.replace("alpha = 0.5 : f64", "tf.d = dense<[[1], [2, 3]]> : tensor<2x2xi8>"),
                     ParseError, "5:47", "ragged"),
    "truncated": (GOOD[GOOD.index(RET):], "", ParseError, "6:5", "got 'end of input'"),
    "function type mismatch": ("-> (tensor<4xf32>), sym", "-> (tensor<4xi64>), sym", VerificationError, "2:3",
                               "do not match function_type results"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_malformed_text_gives_one_line_error_with_position(case):
    old, new, err, where, fragment = BAD_CASES[case]
    assert old in GOOD
    text = GOOD.replace(old, new)
    with pytest.raises((ParseError, VerificationError)) as info:
        parse_module(text, source="bad.mlir")
    e = info.value
    msg = str(e)
    assert type(e) is err, f"{type(e).__name__}: {msg}"
    assert "\n" not in msg
    assert msg.startswith(f"bad.mlir:{where}:"), msg
    assert fragment in msg, msg


def test_good_text_parses_and_runs():
    from tensorforge.ir import interpret
    m = parse_module(GOOD)
    out = interpret(m, np.array([1, -2, 3, -4], np.float32), np.array([0, 0, -10, 1], np.float32))[0]
    np.testing.assert_allclose(out, [1, -1, -3.5, -1.5])


def test_containers_need_their_block():
    with pytest.raises(ParseError, match=r"^<text>:1:1: 'builtin.module' needs exactly one region with one block$"):
        parse_module('"builtin.module"() ({\n}) : () -> ()\n')
    with pytest.raises(ParseError, match=r"^<text>:1:1: 'func.func' needs exactly one region"):
        parse_module('"func.func"() {function_type = () -> (), sym_name = "f"} : () -> ()')


def test_value_from_another_function_is_rejected():
    text = print_module(region_module())
    # 'other' uses a value that only exists in 'main'
    text = text.replace('"graph.neg"(%arg0)', '"graph.neg"(%1)', 1)
    with pytest.raises(ParseError, match=r"^<text>:24:22: use of undefined value '%1'$"):
        parse_module(text)


@pytest.mark.parametrize("trailer,fragment", [
    ('{-#\n  dialect_resources: {\n    builtin: {\n      tf_x: "0x0400000000"\n    }\n  }\n#-}', "data bytes"),
    ('{-#\n  dialect_resources: {\n    builtin: {\n      tf_x: "0xZZ"\n    }\n  }\n#-}', "bad hex digits"),
    ('{-#\n  dialect_resources: {\n    builtin: {\n      tf_x "0x00"\n    }\n  }\n#-}', "expected ':'"),
    ('{-#\n  dialect_resources: {\n    builtin: {\n      tf_x: 12\n    }\n  }\n#-}', "not a hex string"),
])
def test_malformed_resource_trailer(trailer, fragment):
    text = GOOD.replace("alpha = 0.5 : f64", "alpha = 0.5 : f64, tf.w = dense_resource<tf_x> : tensor<2xf32>")
    with pytest.raises(ParseError) as info:
        parse_module(text + "\n" + trailer + "\n")
    msg = str(info.value)
    assert "\n" not in msg and re.match(r"<text>:\d+:\d+: ", msg) and fragment in msg, msg


# ---- fuzzing: damaged text never escapes as anything but our errors ------------------------
_FUZZ_TEXTS = [GOOD, print_module(region_module()), print_module(every_attribute_module()),
               print_module(constants_module(np.random.default_rng(3)), inline_resources=True,
                            large_elements=100)]
_FUZZ_PIECES = list('%"(){}[]<>:,=#^0123456789abcdefx.-?\n ') + [
    "->", "tensor<", "memref<", "dense<", "dense_resource<", "array<i64", "array<f64:", "0x", "{-#", "#-}",
    "0xFFFFFFFFFFFFFFFFFFFF", "1e400", ' : f32', '"\\', "^bb1:", "%arg0", "%0#7"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(range(len(_FUZZ_TEXTS))),
       st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["cut", "insert", "copy"]), st.integers(1, 20),
                          st.sampled_from(_FUZZ_PIECES), st.floats(0, 1)), min_size=1, max_size=3))
def test_damaged_text_gives_only_parse_or_verification_errors(which, edits):
    text = _FUZZ_TEXTS[which]
    for where, how, n, piece, src in edits:
        p = int(where * len(text))
        if how == "cut":
            text = text[:p] + text[p + n:]
        elif how == "insert":
            text = text[:p] + piece + text[p:]
        else:
            q = int(src * len(text))
            text = text[:p] + text[q:q + n] + text[p:]
    try:
        parse_module(text)
    except (ParseError, VerificationError) as e:
        msg = str(e)
        assert "\n" not in msg and re.match(r"<text>:\d+:\d+: ", msg), msg
