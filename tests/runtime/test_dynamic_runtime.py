"""Models with symbolic dims at run time: binding, range and unification errors, output shapes,
the arena grown per call, artifacts that keep their symbols, and the generated ``tf_run_dyn``.

Most tests run a small library written here by hand in the exact ABI ``codegen/c/model.py``
emits (``tf_run_dyn`` + kernels taking ``tf_dims`` last), so the runtime is tested on its own,
whatever state the kernel emitters are in; the end-to-end test compiles a real graph.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.c.build import target_record
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.target import Target
from tensorforge.errors import InputShapeError, TensorforgeError
from tensorforge.ir.symbolic import SymbolRange, SymbolTable
from tensorforge.runtime import artifact
from tensorforge.runtime.arena_plan import DynamicPlan, PlannedBuffer
from tensorforge.runtime.native import NativeModel
from tensorforge.runtime.signature import TensorSpec, describe_signature

# x: f32[b, s], y: f32[s] -> z = 2*w*(x + y) : f32[b, s],  r = rowsum((x + y)^2) : f32[b]
# t = x + y and u = t*t are intermediates in the arena (buffers 0 and 1).
_C = r"""
#include <stdint.h>
#include <string.h>
static int tf_threads = 0;
void tf_set_num_threads(int n) { tf_threads = n; }
int tf_get_num_threads(void) { return tf_threads > 0 ? tf_threads : 1; }
static void k_add(const float* restrict x, const float* restrict y, float* restrict t,
                  const int64_t* restrict tf_dims) {
  const int64_t tf_sym_b = tf_dims[0], tf_sym_s = tf_dims[1];
  for (int64_t i = 0; i < tf_sym_b; i++) for (int64_t j = 0; j < tf_sym_s; j++)
    t[i * tf_sym_s + j] = x[i * tf_sym_s + j] + y[j];
}
static void k_square(const float* restrict t, float* restrict u, const int64_t* restrict tf_dims) {
  const int64_t n = tf_dims[0] * tf_dims[1];
  for (int64_t i = 0; i < n; i++) u[i] = t[i] * t[i];
}
static void k_rowsum(const float* restrict u, float* restrict r, const int64_t* restrict tf_dims) {
  const int64_t tf_sym_b = tf_dims[0], tf_sym_s = tf_dims[1];
  for (int64_t i = 0; i < tf_sym_b; i++) { float acc = 0; for (int64_t j = 0; j < tf_sym_s; j++) acc += u[i * tf_sym_s + j]; r[i] = acc; }
}
static void k_scale(const float* restrict t, const float* restrict w, float* restrict z, const int64_t* restrict tf_dims) {
  const int64_t n = tf_dims[0] * tf_dims[1];
  for (int64_t i = 0; i < n; i++) z[i] = 2.0f * w[0] * t[i];
}
void tf_run_dyn(void* const* inputs, void* const* outputs, char* arena, const char* weights,
                const int64_t* tf_dims, const int64_t* offsets) {
  k_add((const float*)inputs[0], (const float*)inputs[1], (float*)(arena + offsets[0]), tf_dims);
  k_square((const float*)(arena + offsets[0]), (float*)(arena + offsets[1]), tf_dims);
  k_rowsum((const float*)(arena + offsets[1]), (float*)outputs[1], tf_dims);
  k_scale((const float*)(arena + offsets[0]), (const float*)weights, (float*)outputs[0], tf_dims);
}
"""

W = 1.5
TABLE = SymbolTable([SymbolRange("b", 1, 64, hint=4), SymbolRange("s", 1, 512, hint=16)])
INPUTS = [TensorSpec("x", ("b", "s"), "f32"), TensorSpec("y", ("s",), "f32")]
OUTPUTS = [TensorSpec("z", ("b", "s"), "f32"), TensorSpec("r", ("b",), "f32")]
PLAN = DynamicPlan(["b", "s"], [PlannedBuffer("4*b*s", 0, 3), PlannedBuffer("4*b*s", 1, 2)])


@pytest.fixture(scope="module")
def library():
    return compile_c(_C, name="dynamic_runtime_test")


def _model(library, threads: int = 1) -> NativeModel:
    weights = np.frombuffer(np.array([W], np.float32).tobytes(), np.uint8)
    return NativeModel(library.lib, INPUTS, OUTPUTS, weights, 0, threads=threads, library_path=library.path,
                       source=_C, build={"target": target_record(Target.host())}, symbols=TABLE, plan=DynamicPlan.from_json(PLAN.to_json()))


def _data(b: int, s: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((b, s)).astype(np.float32), rng.standard_normal(s).astype(np.float32)


def _expected(x, y):
    t = x.astype(np.float64) + y
    return 2 * W * t, (t * t).sum(axis=1)


def test_one_library_runs_every_size_in_the_range(library):
    model = _model(library)
    for b, s in [(1, 1), (3, 7), (64, 512), (2, 5), (3, 7)]:
        x, y = _data(b, s, seed=b * 1000 + s)
        z, r = model(x, y)
        assert z.shape == (b, s) and r.shape == (b,)
        ez, er = _expected(x, y)
        np.testing.assert_allclose(z, ez, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(r, er, rtol=1e-4, atol=1e-4)


def test_arena_grows_only_when_a_call_needs_more(library):
    model = _model(library)
    model(*_data(8, 32))
    big = model.arena
    assert big.nbytes >= 2 * 4 * 8 * 32              # t and u are live together
    model(*_data(2, 3))
    assert model.arena is big                          # smaller call: the same arena
    model(*_data(16, 64))
    assert model.arena.nbytes >= 2 * 4 * 16 * 64 and model.arena is not big


def test_offsets_keep_live_buffers_apart(library):
    model = _model(library)
    offsets, arena = model.plan.offsets_for((3, 10))
    assert sorted(offsets) == [0, 128] and arena == 256      # 120 bytes each, 64-aligned


def test_outputs_are_written_into_out_arrays(library):
    model = _model(library)
    x, y = _data(5, 9)
    z, r = np.empty((5, 9), np.float32), np.empty(5, np.float32)
    got = model.run([x, y], out=[z, r])
    assert got[0] is z and got[1] is r
    np.testing.assert_allclose(z, _expected(x, y)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shapes, message", [
    (((65, 4), (4,)), "input 'x' axis 0 is 65, outside b's range 1..64"),
    (((2, 513), (513,)), "input 'x' axis 1 is 513, outside s's range 1..512"),
    (((3, 4), (5,)), "inputs 'x' axis 1 (4) and 'y' axis 0 (5) must agree on 's'"),
    (((3, 4, 1), (4,)), "input 'x' has rank 3 (shape [3, 4, 1]); the model takes f32[b, s]"),
])
def test_bad_shapes_raise_one_line_and_leave_out_untouched(library, shapes, message):
    model = _model(library)
    (xs, ys) = shapes
    x, y = np.ones(xs, np.float32), np.ones(ys, np.float32)
    z, r = np.full((3, 4), 7.0, np.float32), np.full(3, 7.0, np.float32)
    with pytest.raises(InputShapeError) as info:
        model.run([x, y], out=[z, r])
    assert str(info.value) == message and "\n" not in str(info.value)
    assert (z == 7.0).all() and (r == 7.0).all()


def test_out_arrays_of_the_wrong_size_for_this_call_are_refused_before_running(library):
    model = _model(library)
    x, y = _data(4, 6)
    z, r = np.full((4, 5), 7.0, np.float32), np.full(4, 7.0, np.float32)
    with pytest.raises(TensorforgeError, match=r"out\[0\] for output 'z' float32\[b, s\]: got float32\[4, 5\]"):
        model.run([x, y], out=[z, r])
    assert (z == 7.0).all() and (r == 7.0).all()


def test_divisor_constraints_are_checked(library):
    table = SymbolTable([SymbolRange("b", 1, 64, divisor=2), SymbolRange("s", 1, 512)])
    model = _model(library)
    model.symbols = table
    with pytest.raises(TensorforgeError, match=r"^input 'x' axis 0 is 3, outside b's range 1..64 \(multiple of 2\)$"):
        model(*_data(3, 4))
    assert model(*_data(4, 4))[0].shape == (4, 4)


def test_torch_in_torch_out(library):
    torch = pytest.importorskip("torch")
    model = _model(library)
    x, y = _data(3, 5)
    z, r = model(torch.from_numpy(x), torch.from_numpy(y))
    assert isinstance(z, torch.Tensor) and tuple(z.shape) == (3, 5)
    np.testing.assert_allclose(r.numpy(), _expected(x, y)[1], rtol=1e-4, atol=1e-4)


def test_bind_and_output_shapes(library):
    model = _model(library)
    assert model.bind([(3, 7), (7,)]) == {"b": 3, "s": 7}
    assert model.output_shapes([(3, 7), (7,)]) == [(3, 7), (3,)]


def test_signature_names_symbols_and_ranges():
    text = describe_signature(INPUTS, OUTPUTS, TABLE)
    assert text.splitlines() == ["inputs:", "  x: f32[b, s]  b in 1..64  s in 1..512", "  y: f32[s]",
                                 "outputs:", "  z: f32[b, s]", "  r: f32[b]"]


def test_artifact_round_trip_keeps_symbols_and_plan(library, tmp_path):
    model = _model(library)
    path = artifact.save(model, tmp_path / "dyn.tfm")
    manifest = artifact.read_manifest(path)
    assert manifest["format_version"] == 2 and manifest["inputs"][0]["shape"] == ["b", "s"]
    loaded = tensorforge.load(path, threads=1)
    assert loaded.native.is_dynamic and loaded.native.symbols.get("s").hi == 512
    assert [s.shape for s in loaded.input_specs] == [("b", "s"), ("s",)]
    x, y = _data(6, 11)
    z, r = loaded(x, y)
    np.testing.assert_allclose(z, _expected(x, y)[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(TensorforgeError, match="outside b's range 1..64"):
        loaded(*_data(65, 2))
    assert "b in 1..64" in loaded.describe()


def test_interpreter_target_reports_the_same_signature():
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.symbolic import set_symbol_table
    from tensorforge.ir.types import tensor
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(("b", "s")), tensor(("s",))], arg_names=["x", "y"])
    g = f.builder().graph
    f.set_return([g.add(f.args[0], f.args[1])])
    set_symbol_table(f, TABLE)
    cm = tensorforge.compile(m, target="interpreter", passes=False)
    assert [s.shape for s in cm.input_specs] == [("b", "s"), ("s",)] and cm.output_specs[0].shape == ("b", "s")
    assert cm.describe().splitlines()[1] == "  x: f32[b, s]  b in 1..64  s in 1..512"
    x, y = _data(3, 5)
    np.testing.assert_allclose(cm(x, y), x + y, rtol=1e-6)


def _emitters_take_symbols() -> bool:
    from tensorforge.codegen.c.emit_loop import FunctionEmitter
    return "symbols" in inspect.signature(FunctionEmitter).parameters


@pytest.mark.skipif(not _emitters_take_symbols(),
                    reason="needs FunctionEmitter(..., symbols=) from the kernels layer (codegen/c/emit_loop.py): "
                           "kernels with symbolic bounds and the tf_dims parameter")
def test_compiled_elementwise_graph_runs_at_every_batch(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_FUSION", "off")    # one kernel per op: intermediates live in the arena
    from tensorforge.ir.builtin import ModuleOp
    from tensorforge.ir.symbolic import set_symbol_table
    from tensorforge.ir.types import tensor
    m = ModuleOp.create()
    f = m.add_function("main", [tensor(("b", 8)), tensor(("b", 8))], arg_names=["x", "y"])
    g = f.builder().graph
    t = g.tanh(g.add(f.args[0], f.args[1]))
    f.set_return([g.mul(t, f.args[0]), g.exp(t)])
    set_symbol_table(f, SymbolTable([SymbolRange("b", 1, 64, hint=8)]))
    cm = tensorforge.compile(m, threads=1)
    assert cm.native.is_dynamic and "tf_run_dyn" in cm.source and "arena + offsets[" in cm.source
    assert len(cm.native.plan.buffers) >= 2
    for b in (1, 3, 17, 64):
        rng = np.random.default_rng(b)
        x, y = rng.standard_normal((2, b, 8)).astype(np.float32)
        p, e = cm(x, y)
        np.testing.assert_allclose(p, np.tanh(x + y) * x, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(e, np.exp(np.tanh(x + y)), rtol=1e-5, atol=1e-6)
    with pytest.raises(TensorforgeError, match=r"^input 'x' axis 0 is 65, outside b's range 1..64$"):
        cm(np.ones((65, 8), np.float32), np.ones((65, 8), np.float32))
    cm.save(tmp_path / "ew.tfm")
    again = tensorforge.load(tmp_path / "ew.tfm", threads=1)
    x = np.ones((5, 8), np.float32)
    np.testing.assert_allclose(again(x, x)[1], np.exp(np.tanh(2 * x)), rtol=1e-5)
