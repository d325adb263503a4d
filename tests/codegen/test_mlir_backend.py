"""target="mlir": upstream MLIR tools (mlir-opt-19, mlir-translate-19, llc-19) build a library that
must agree with NumPy on hand-written modules and with the C backend (target="cpu") on the zoo.

The zoo comparison is the point of the backend: two code paths that share nothing below the loop
level. Tolerance: ``rtol=1e-5`` plus ``atol=1e-5 * max|reference|`` (the issue's "1e-5 relative",
with an absolute floor scaled to the output so values near zero that both backends compute in a
different order do not fail on their last bit).
"""
from __future__ import annotations

import numpy as np
import pytest

from tensorforge.codegen.mlir.toolchain import compile_mlir, mlir_tools_available
from tensorforge.errors import CompileError, CompilerNotFoundError, InputShapeError, TensorforgeError
from tensorforge.runtime.mlir_model import MlirModel
from tensorforge.runtime.signature import TensorSpec

pytestmark = pytest.mark.skipif(not mlir_tools_available(),
                                reason="mlir-opt-19, mlir-translate-19, llc-19 or a C compiler is missing "
                                       "(apt-get install mlir-19-tools llvm-19)")
# The contract of loop_export: inputs then outputs as memrefs, no results, C interface.
MATMUL_TANH = """
module {
  func.func @main(%a: memref<4x8xf32>, %b: memref<8x3xf32>, %c: memref<4x3xf32>) attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c3 = arith.constant 3 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %zero = arith.constant 0.0 : f32
    scf.for %i = %c0 to %c4 step %c1 {
      scf.for %j = %c0 to %c3 step %c1 {
        %acc = scf.for %k = %c0 to %c8 step %c1 iter_args(%s = %zero) -> (f32) {
          %x = memref.load %a[%i, %k] : memref<4x8xf32>
          %y = memref.load %b[%k, %j] : memref<8x3xf32>
          %p = arith.mulf %x, %y : f32
          %n = arith.addf %s, %p : f32
          scf.yield %n : f32
        }
        %t = math.tanh %acc : f32
        memref.store %t, %c[%i, %j] : memref<4x3xf32>
      }
    }
    return
  }
}
"""

# A rank-0 input (no sizes/strides in its descriptor), a bool (i1) input and two outputs.
SELECT_SCALE = """
module {
  func.func @main(%s: memref<f32>, %m: memref<5xi1>, %x: memref<5xf32>, %y: memref<5xf32>, %n: memref<i1>)
      attributes {llvm.emit_c_interface} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c5 = arith.constant 5 : index
    %false = arith.constant false
    %scale = memref.load %s[] : memref<f32>
    %any = scf.for %i = %c0 to %c5 step %c1 iter_args(%acc = %false) -> (i1) {
      %b = memref.load %m[%i] : memref<5xi1>
      %v = memref.load %x[%i] : memref<5xf32>
      %w = arith.mulf %v, %scale : f32
      %r = arith.select %b, %w, %v : f32
      memref.store %r, %y[%i] : memref<5xf32>
      %o = arith.ori %acc, %b : i1
      scf.yield %o : i1
    }
    memref.store %any, %n[] : memref<i1>
    return
  }
}
"""


def spec(name: str, shape, dtype: str = "f32") -> TensorSpec:
    return TensorSpec(name, tuple(shape), dtype)


@pytest.fixture(scope="module")
def matmul_model() -> MlirModel:
    times: dict[str, float] = {}
    lib = compile_mlir(MATMUL_TANH, "test_matmul_tanh", times)
    return MlirModel(lib, [spec("a", (4, 8)), spec("b", (8, 3))], [spec("c", (4, 3))], MATMUL_TANH,
                     {"compile_s": times})


# ---- the toolchain and the runtime on hand-written modules ---------------------------------------
def test_matmul_tanh_matches_numpy(matmul_model, rng):
    a = rng.standard_normal((4, 8), dtype=np.float32)
    b = rng.standard_normal((8, 3), dtype=np.float32)
    out = matmul_model(a, b)
    assert out.shape == (4, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out, np.tanh(a @ b), rtol=1e-5, atol=1e-6)
    assert matmul_model.source == MATMUL_TANH
    assert set(matmul_model.build["compile_s"]) >= {"total"}


def test_rank0_and_bool_memrefs(rng):
    lib = compile_mlir(SELECT_SCALE, "test_select_scale")
    model = MlirModel(lib, [spec("s", ()), spec("m", (5,), "bool"), spec("x", (5,))],
                      [spec("y", (5,)), spec("n", (), "bool")], SELECT_SCALE)
    x = rng.standard_normal(5).astype(np.float32)
    m = np.array([True, False, True, False, False])
    y, n = model(np.float32(3.0), m, x)
    np.testing.assert_array_equal(y, np.where(m, x * np.float32(3.0), x))
    assert n.dtype == np.bool_ and n.shape == () and bool(n)
    _, n = model(np.float32(3.0), np.zeros(5, bool), x)
    assert not bool(n)


def test_stage_times_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path))
    first: dict[str, float] = {}
    lib = compile_mlir(MATMUL_TANH, "cached", first)
    assert {"mlir-opt", "mlir-translate", "llc", "link", "total"} <= set(first)
    assert lib.is_relative_to(tmp_path) and lib.with_suffix(".mlir").read_text() == MATMUL_TANH
    again: dict[str, float] = {}
    assert compile_mlir(MATMUL_TANH, "cached", again) == lib
    assert "mlir-opt" not in again and "cache" in again
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix not in (".so", ".mlir")]
    assert not leftovers


def test_torch_in_torch_out(matmul_model):
    torch = pytest.importorskip("torch")
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    out = matmul_model(a, b)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.tanh(a @ b), rtol=1e-5, atol=1e-6)


def test_bad_inputs_are_clear_errors(matmul_model):
    a = np.zeros((4, 8), np.float32)
    with pytest.raises(InputShapeError, match=r"input #1 'b'.*shape \[3, 8\].*\[8, 3\]"):
        matmul_model(a, np.zeros((3, 8), np.float32))
    with pytest.raises(TensorforgeError, match=r"dtype float64"):
        matmul_model(a, np.zeros((8, 3)))
    with pytest.raises(TensorforgeError, match=r"takes 2 input\(s\)"):
        matmul_model(a)


def test_corrupt_text_names_the_tool():
    with pytest.raises(CompileError, match=r"mlir-opt-19 failed building 'corrupt'") as info:
        compile_mlir("func.func @main(%a: memref<4xf32>) {\n  %x = nonsense\n", "corrupt")
    assert "error" in str(info.value)


def test_missing_tools_say_what_to_install(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CC", raising=False)
    assert not mlir_tools_available()
    with pytest.raises(CompilerNotFoundError, match="mlir-19-tools"):
        compile_mlir(MATMUL_TANH, "no_tools")


# ---- tensorforge.compile(..., target="mlir") ------------------------------------------------------
def _if_module():
    """main(c, x) = if c { x + x } else { -x }: a model with control flow."""
    from tensorforge.ir.builder import Builder, make_op
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.core import Block, Region
    from tensorforge.ir.types import DType, TensorType
    f4 = TensorType((4,), DType.f32)
    m = ModuleOp.create()
    f = m.add_function("main", [TensorType((), DType.bool), f4], ["c", "x"])
    then_b, else_b = Block(), Block()
    tb, eb = Builder(then_b), Builder(else_b)
    tb.create("graph.yield", [tb.graph.add(f.args[1], f.args[1])])
    eb.create("graph.yield", [eb.graph.neg(f.args[1])])
    y = f.builder().insert(make_op("graph.if", [f.args[0]], {}, [f4], [Region([then_b]), Region([else_b])]))
    f.set_return([y.results[0]])
    return m


def test_control_flow_and_low_precision_are_refused():
    import tensorforge
    with pytest.raises(TensorforgeError, match="control flow.*no mlir build.*target='cpu'"):
        tensorforge.compile(_if_module(), target="mlir")
    with pytest.raises(TensorforgeError, match="precision='int8'.*target='cpu'"):
        tensorforge.compile(_if_module(), target="mlir", precision="int8")


class Elementwise:
    """relu, maximum, minimum, add and exp of inputs holding NaN and infinities (torch's semantics:
    NaN propagates through relu, maximum and minimum)."""

    @staticmethod
    def module():
        torch = pytest.importorskip("torch")

        class Net(torch.nn.Module):
            def forward(self, x, y):
                return torch.relu(x), torch.maximum(x, y), torch.minimum(x, y), torch.exp(x) + y

        return Net()

    @staticmethod
    def inputs():
        x = np.array([[np.nan, -1.0, 2.0, np.inf], [-np.inf, 0.0, np.nan, 3.0]], np.float32)
        y = np.array([[1.0, np.nan, -np.inf, 0.5], [2.0, np.inf, -1.0, np.nan]], np.float32)
        return x, y


def test_nan_and_inf_propagate_as_torch():
    import tensorforge
    torch = pytest.importorskip("torch")
    net = Elementwise.module()
    x, y = Elementwise.inputs()
    cm = tensorforge.compile(net, (torch.from_numpy(x), torch.from_numpy(y)), target="mlir")
    got = cm.run(x, y)
    want = [t.numpy() for t in net(torch.from_numpy(x), torch.from_numpy(y))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)         # NaN == NaN here, and inf must stay inf


def test_compiled_model_takes_torch_and_checks_shapes():
    import tensorforge
    torch = pytest.importorskip("torch")
    net = Elementwise.module()
    x, y = (torch.from_numpy(a) for a in Elementwise.inputs())
    cm = tensorforge.compile(net, (x, y), target="mlir")
    assert cm.target == "mlir" and "func.func @main" in cm.source and "llvm.emit_c_interface" in cm.source
    outs = cm(x, y)
    assert all(isinstance(o, torch.Tensor) for o in outs)
    with pytest.raises(InputShapeError, match=r"input #0.*shape \[3, 4\].*compiled for \[2, 4\]"):
        cm(torch.zeros(3, 4), y)
    with pytest.raises(TensorforgeError, match="save needs a native target; target='mlir'"):
        cm.save("never-written.tfm")


SMALL_ZOO = ("mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
             "bert_tiny", "gpt2_tiny")


@pytest.mark.parametrize("name", SMALL_ZOO)
def test_small_zoo_matches_the_c_backend(name):
    import tensorforge
    from tensorforge import models
    model, example = models.get(name)
    arrays = [t.numpy() for t in example]
    got = tensorforge.compile(model, example, target="mlir").run(*arrays)
    want = tensorforge.compile(model, example, target="cpu").run(*arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(w), initial=0.0)))
