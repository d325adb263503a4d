"""Export to upstream MLIR (codegen/mlir, docs/mlir.md): what we print is verified by the real
``mlir-opt-19`` with registered dialects only (no ``--allow-unregistered-dialect``), and it lowers
through the stock upstream pipeline to an object file.

Every small zoo variant is exported at both levels and verified; mlp_small and resnet18_small go
on through mlir-opt's LLVM pipeline, mlir-translate and llc (what the upstream-MLIR backend runs).
A tiny hand-built graph is lowered end to end and called through the C interface, against the
reference interpreter.  Tests that need the MLIR tools skip when they are not installed.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess
import warnings
from functools import lru_cache
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.mlir.loop_export import loop_module_text
from tensorforge.codegen.mlir.scalar import Emitter, scalar_value
from tensorforge.codegen.mlir.structured_export import structured_module_text
from tensorforge.codegen.mlir.target import MlirTarget
from tensorforge.errors import CompileError, TensorforgeError
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.interpreter import run_function
from tensorforge.ir.types import DType, ScalarType, tensor
from tensorforge.passes.pipeline import optimize
from tests.filecheck_util import assert_filecheck

MLIR_OPT = shutil.which("mlir-opt-19")
needs_mlir = pytest.mark.skipif(MLIR_OPT is None, reason="mlir-opt-19 missing (apt-get install mlir-19-tools)")
TOOLS = [shutil.which(t) for t in ("mlir-opt-19", "mlir-translate-19", "llc-19", "gcc")]
needs_llvm = pytest.mark.skipif(not all(TOOLS), reason="mlir-opt-19, mlir-translate-19, llc-19 or gcc missing")

SMALL = ["mlp_small", "resnet18_small", "resnet50_small", "mobilenet_v2_small", "efficientnet_b0_small",
         "bert_tiny", "gpt2_tiny"]
# The pipeline that lowered a tensor-level linalg.generic to LLVM (issue 18); the loop level starts
# after bufferization.
BUFFERIZE = "--one-shot-bufferize=bufferize-function-boundaries"
TO_LLVM = ("--buffer-deallocation-pipeline --convert-linalg-to-loops --convert-scf-to-cf --convert-math-to-libm "
           "--convert-math-to-llvm --convert-arith-to-llvm --expand-strided-metadata --finalize-memref-to-llvm "
           "--convert-func-to-llvm --convert-cf-to-llvm --reconcile-unrealized-casts").split()


def _run(cmd: list[str], timeout: float = 120) -> None:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd[:2])} failed:\n{out.stderr[:3000]}"


def _verify(text: str, path: Path, *passes: str) -> None:
    """mlir-opt-19 (registered dialects only) parses, verifies and runs ``passes`` on ``text``."""
    path.write_text(text)
    _run([MLIR_OPT, *passes, str(path), "-o", str(path.with_suffix(".out.mlir"))])


def _to_object(text: str, path: Path, *passes: str) -> Path:
    """``text`` through the LLVM pipeline, mlir-translate and llc; the object file's path."""
    _verify(text, path, *passes, *TO_LLVM)
    ll = path.with_suffix(".ll")
    _run([TOOLS[1], "--mlir-to-llvmir", str(path.with_suffix(".out.mlir")), "-o", str(ll)])
    obj = path.with_suffix(".o")
    _run([TOOLS[2], "-O2", "-filetype=obj", "-relocation-model=pic", str(ll), "-o", str(obj)])
    return obj


@lru_cache(maxsize=None)
def _zoo_module(name: str) -> ModuleOp:
    """The optimised graph of a zoo model (imported once per test session: importing is the slow part)."""
    torch = pytest.importorskip("torch")
    from tensorforge.models import get
    module, inputs = get(name)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        graph = tensorforge.import_model(module, inputs)
    optimize(graph, MlirTarget.host())
    return graph


# ---- every small zoo model --------------------------------------------------------------
@needs_mlir
@pytest.mark.parametrize("level", ["structured", "loop"])
@pytest.mark.parametrize("name", SMALL)
def test_small_zoo_models_export_and_verify_with_registered_dialects(name, level, tmp_path):
    graph = _zoo_module(name)
    text = structured_module_text(graph) if level == "structured" else loop_module_text(graph)
    assert "graph." not in text and "structured." not in text and "loop." not in text
    _verify(text, tmp_path / f"{name}.mlir")


@needs_llvm
@pytest.mark.parametrize("name", ["mlp_small", "resnet18_small"])
def test_loop_level_lowers_to_an_object_file_with_upstream_tools(name, tmp_path):
    text = loop_module_text(_zoo_module(name))
    assert "attributes {llvm.emit_c_interface}" in text
    obj = _to_object(text, tmp_path / f"{name}.mlir")
    assert obj.stat().st_size > 0


# ---- a tiny graph, end to end -----------------------------------------------------------
def _tiny_module() -> tuple[ModuleOp, list[np.ndarray]]:
    """A padded conv + bias + relu, a softmax, a NaN-propagating max reduction, a bool output, an
    input returned as is and twice the same output (the copies @main makes)."""
    rng = np.random.default_rng(0)
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((1, 2, 5, 5)), tensor((3, 4))], arg_names=["img", "x"])
    g = f.builder().graph
    img, x = f.args
    w = g.constant(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))      # 54 elements: inline
    b = g.constant(rng.standard_normal(3).astype(np.float32))
    big = g.constant(rng.standard_normal((4, 20)).astype(np.float32))          # 80 elements: a resource
    conv = g.relu(g.conv(img, w, b, pads=(1, 1, 1, 1)))
    mm = g.matmul(x, big)
    f.set_return([conv, g.softmax(mm, axis=1), g.reduce_max(x, axes=(1,)), g.gt(x, g.constant(np.float32(0.0))),
                  x, mm, mm])
    xv = rng.standard_normal((3, 4)).astype(np.float32)
    xv[1, 2] = np.nan
    return m, [rng.standard_normal((1, 2, 5, 5)).astype(np.float32), xv]


@needs_llvm
def test_tiny_structured_export_bufferizes_and_lowers_to_llvm(tmp_path):
    m, _ = _tiny_module()
    optimize(m, MlirTarget.host())
    text = structured_module_text(m)
    assert_filecheck(text, """
    // CHECK: func.func @main(%arg0: tensor<1x2x5x5xf32>, %arg1: tensor<3x4xf32>) -> (tensor<1x3x5x5xf32>, {{.*}}tensor<3x4xi1>, tensor<3x4xf32>, tensor<3x20xf32>, tensor<3x20xf32>)
    // CHECK: arith.constant dense<"0x{{[0-9A-F]+}}"> : tensor<3x2x3x3xf32>
    // CHECK: linalg.generic {indexing_maps = [{{.*}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
    // CHECK: tensor.extract %arg0[{{.*}}] : tensor<1x2x5x5xf32>
    // CHECK: arith.select
    // CHECK: linalg.yield
    // CHECK: arith.maximumf
    // CHECK: return
    // CHECK: dialect_resources
    """)
    _to_object(text, tmp_path / "tiny.mlir", BUFFERIZE)


def _descriptor(a: np.ndarray):
    """An MLIR memref descriptor (allocated, aligned, offset, sizes, strides) of a C-contiguous array."""
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if a.ndim:
        fields += [("sizes", ctypes.c_int64 * a.ndim), ("strides", ctypes.c_int64 * a.ndim)]
    d = type("Memref", (ctypes.Structure,), {"_fields_": fields})()
    d.allocated = d.aligned = a.ctypes.data
    for k in range(a.ndim):
        d.sizes[k], d.strides[k] = a.shape[k], a.strides[k] // a.itemsize
    return d


@needs_llvm
def test_tiny_loop_export_runs_through_the_c_interface_like_the_interpreter(tmp_path):
    m, inputs = _tiny_module()
    expected = run_function(m.main, inputs)
    optimize(m, MlirTarget.host())
    text = loop_module_text(m)
    assert_filecheck(text, """
    // CHECK: memref.global "private" constant @tf_w{{[0-9]+}} : memref<4x20xf32> = dense_resource<tf_{{[0-9a-f]+}}>
    // CHECK: func.func private @k0_
    // CHECK: scf.for
    // CHECK: {tf.kind = "serial"}
    // CHECK: func.func @main(%in0: memref<1x2x5x5xf32>, %in1: memref<3x4xf32>, %out0: memref<1x3x5x5xf32>, {{.*}}%out3: memref<3x4xi1>, %out4: memref<3x4xf32>, %out5: memref<3x20xf32>, %out6: memref<3x20xf32>) attributes {llvm.emit_c_interface}
    // CHECK: func.call @k
    // CHECK: memref.copy %in1, %out4
    // CHECK: memref.copy %out5, %out6
    // CHECK: return
    """)
    obj = _to_object(text, tmp_path / "tiny.mlir")
    lib_path = tmp_path / "tiny.so"
    _run([TOOLS[3], "-shared", str(obj), "-o", str(lib_path), "-lm"])
    lib = ctypes.CDLL(str(lib_path))
    outs = [np.zeros(e.shape, e.dtype) for e in expected]
    arrays = [np.ascontiguousarray(a) for a in inputs] + outs
    descriptors = [_descriptor(a) for a in arrays]
    lib._mlir_ciface_main(*[ctypes.byref(d) for d in descriptors])
    for got, want in zip(outs, expected):
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)     # NaN where the reference has it
        else:
            np.testing.assert_array_equal(got, want)


# ---- scalar semantics, errors and the command line ----------------------------------------
def _scalar_text(name: str, dtype: DType, n: int = 2, **attrs) -> str:
    em = Emitter()
    t = ScalarType(dtype)
    result = ScalarType(DType.bool) if name in ("eq", "ne", "lt", "le", "gt", "ge") else t
    scalar_value(em, name, [f"%a{k}" for k in range(n)], [t] * n, result, attrs)
    return em.body_text()


def test_scalar_ops_keep_ieee_and_integer_semantics():
    assert "arith.maximumf" in _scalar_text("max", DType.f32)          # propagates NaN (maxnumf would not)
    assert "arith.minimumf" in _scalar_text("min", DType.f32)
    assert "arith.maxui" in _scalar_text("max", DType.u8)
    assert "arith.cmpf une" in _scalar_text("ne", DType.f32)           # != is true on NaN, as NumPy
    assert "arith.cmpf olt" in _scalar_text("lt", DType.f32)
    assert "arith.cmpi ult" in _scalar_text("lt", DType.u16)
    div = _scalar_text("div", DType.i32)                                 # truncates; 0 for a zero divisor
    assert "arith.divsi" in div and "arith.select" in div
    assert "arith.divui" in _scalar_text("div", DType.u32)
    relu = _scalar_text("relu", DType.f32, 1)                             # NaN and -0.0 pass through
    assert "arith.cmpf olt" in relu and "arith.select" in relu and "maximumf" not in relu
    assert "arith.constant -0.0 : f32" in _scalar_text("mod", DType.f32)  # mod(3, -3) is -0.0, as NumPy


def test_a_scalar_op_without_a_mapping_names_it():
    with pytest.raises(CompileError, match="'scalar.no_such_op' has no upstream MLIR"):
        _scalar_text("no_such_op", DType.f32)
    with pytest.raises(CompileError, match="'scalar.pow' on i32"):
        _scalar_text("pow", DType.i32)


def test_dynamic_shapes_are_a_compile_error_naming_the_dimension():
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(("N", 16))], arg_names=["x"])
    f.set_return([f.builder().graph.relu(f.args[0])])
    for level in ("structured", "loop"):
        with pytest.raises(CompileError, match=r"input 0 \('x'\) has the symbolic dimension 'N': the MLIR "
                                               r"export needs static shapes"):
            tensorforge.export_mlir(m, level)


def test_library_kernels_are_a_compile_error_naming_the_kernel():
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((8,))])
    g = f.builder().graph
    f.set_return([g.nonzero(f.args[0], count="nnz")])
    with pytest.raises(TensorforgeError, match="kernel 'nonzero'.*no upstream-MLIR form"):
        loop_module_text(m)


def test_export_mlir_checks_its_options():
    m, _ = _tiny_module()
    with pytest.raises(TensorforgeError, match="unknown MLIR export level 'llvm'"):
        tensorforge.export_mlir(m, "llvm")
    with pytest.raises(TensorforgeError, match="unknown options: frobnicate"):
        tensorforge.export_mlir(m, "loop", frobnicate=1)
    with pytest.raises(CompileError, match="fast_math"):
        tensorforge.export_mlir(m, "loop", fast_math=True)
    text = tensorforge.export_mlir(m, "loop", threads=2, db=None)        # a native build's options: ignored
    assert text.startswith("module {") and next(iter(m.main.body)).name == "graph.constant"   # not changed


@needs_mlir
def test_cli_writes_a_verified_file(tmp_path, capsys):
    pytest.importorskip("torch")
    from tensorforge.cli import main
    out = tmp_path / "mlp.mlir"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["export-mlir", "mlp_small", "--level", "loop", "-o", str(out), "--verify"]) == 0
    assert out.read_text().startswith("module {")
    assert f"-> {out}" in capsys.readouterr().out
