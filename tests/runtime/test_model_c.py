"""The model C file (codegen/c/model.py): weight blob layout, kernel dedupe, exported ABI."""
from __future__ import annotations

import numpy as np

import tensorforge
from tensorforge.codegen.c.model import weight_blob
from tensorforge.ir.builtin import ModuleOp
from tensorforge.ir.types import tensor


def _constants_module() -> tuple[ModuleOp, list[np.ndarray]]:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 5)).astype(np.float32), np.arange(7, dtype=np.int64),
              rng.standard_normal(1).astype(np.float64)]
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((3, 5))])
    g = f.builder().graph
    c = [g.constant(a) for a in arrays]
    g.constant(np.ones(4, np.float32))                            # unused: left out of the blob
    f.set_return([g.add(f.args[0], c[0]), g.cast(c[1], dtype="f32"), g.cast(c[2], dtype="f32")])
    return m, arrays


def test_weight_blob_places_each_used_constant_aligned_and_zero_pads():
    m, arrays = _constants_module()
    consts = [op for op in m.main.body if op.name == "graph.constant"]
    blob, offsets = weight_blob(m.main)
    assert blob.ctypes.data % 64 == 0 and len(offsets) == 3
    assert id(consts[3].results[0]) not in offsets
    for op, a in zip(consts, arrays):
        off = offsets[id(op.results[0])]
        assert off % 64 == 0
        np.testing.assert_array_equal(blob[off:off + a.nbytes].view(a.dtype).reshape(a.shape), a)
    ends = sorted((offsets[id(op.results[0])], a.nbytes) for op, a in zip(consts, arrays))
    for (off, n), (nxt, _) in zip(ends, ends[1:] + [(blob.nbytes, 0)]):
        assert not blob[off + n:nxt].any()                        # padding is zeros: blobs are reproducible


def test_identical_kernels_are_emitted_once(monkeypatch):
    monkeypatch.setenv("TENSORFORGE_FUSION", "off")     # one kernel per op, so two are the same tanh
    m = ModuleOp.create()
    f = m.add_function("main", [tensor((8, 32)), tensor((8, 32))], arg_names=["a", "b"])
    g = f.builder().graph
    a, b = f.args
    f.set_return([g.tanh(a), g.tanh(b), g.exp(a)])
    cm = tensorforge.compile(m, passes=False)
    build = cm.native.build
    assert (build["kernels"], build["unique_kernels"]) == (3, 2)
    from tensorforge.codegen.c.emit_loop import PRELUDE
    assert cm.source.count("tanhf(") - PRELUDE.count("tanhf(") == 1      # the prelude declares it
    x = np.linspace(-2, 2, 256, dtype=np.float32).reshape(8, 32)
    y = x[::-1].copy()
    ta, tb, ea = cm(x, y)
    np.testing.assert_allclose(ta, np.tanh(x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tb, np.tanh(y), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ea, np.exp(x), rtol=1e-5)


def test_library_exports_the_runtime_abi(small):
    for name in ("tf_run", "tf_set_num_threads", "tf_get_num_threads"):
        assert f" {name}(" in small.source
        assert hasattr(small.native.lib, name)
