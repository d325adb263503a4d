"""``.tfm`` artifacts: round trip in a fresh process without torch/onnx, manifest, target checks."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen.target import Target
from tensorforge.errors import TensorforgeError
from tensorforge.runtime import artifact

from . import models

# Prepended to every child: importing torch, onnx or onnxruntime fails as if they were not installed.
BLOCK_FRONTENDS = textwrap.dedent("""
    import importlib.abc, sys
    class _NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("torch", "onnx", "onnxruntime"):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
            return None
    sys.meta_path.insert(0, _NotInstalled())
    try:
        import torch
    except ImportError:
        pass
    else:
        raise SystemExit("the import blocker does not work")
""")


def run_child(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter (frontends blocked) from the repository root."""
    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "child.py"
    script.write_text(BLOCK_FRONTENDS + textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], cwd=root, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120)
    return proc


LOAD_AND_RUN = """
    import sys, numpy as np, tensorforge
    cm = tensorforge.load(sys.argv[1] if len(sys.argv) > 1 else {path!r})
    inputs = [np.load({inputs!r} + f"/in{{i}}.npy") for i in range({n_in})]
    outs = cm.run(*inputs)
    for j, o in enumerate(outs):
        np.save({inputs!r} + f"/out{{j}}.npy", o)
    assert not any(m.partition(".")[0] in ("torch", "onnx") for m in sys.modules), "a frontend was imported"
    print("ORIGIN", cm.native.build["origin"], "THREADS", cm.threads)
"""


def _round_trip(cm, inputs, tmp_path: Path, **env: str) -> tuple[list[np.ndarray], str]:
    path = tmp_path / "model.tfm"
    cm.save(path)
    for i, x in enumerate(inputs):
        np.save(tmp_path / f"in{i}.npy", x)
    proc = run_child(LOAD_AND_RUN.format(path=str(path), inputs=str(tmp_path), n_in=len(inputs)), tmp_path, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    outs = [np.load(tmp_path / f"out{j}.npy") for j in range(len(cm.native.outputs))]
    return outs, proc.stdout


def test_torch_model_round_trip_in_a_process_without_torch_or_onnx(tmp_path):
    torch = pytest.importorskip("torch")
    from tensorforge import models as zoo
    module, example = zoo.get("mlp_small", batch=2)
    cm = tensorforge.compile(module, example)
    x = example[0].numpy()
    expected = cm(x)
    with torch.no_grad():
        np.testing.assert_allclose(expected, module(example[0]).numpy(), rtol=1e-4, atol=1e-5)
    (out,), stdout = _round_trip(cm, [x], tmp_path)
    np.testing.assert_array_equal(out, expected)              # same library, same weights: identical
    assert "ORIGIN artifact" in stdout


def test_manifest_describes_the_model(small, tmp_path):
    path = tmp_path / "small.tfm"
    small.save(path)
    m = artifact.read_manifest(path)
    assert m["format"] == "tensorforge-model" and m["tensorforge_version"] == tensorforge.__version__
    assert m["inputs"] == [{"name": "x", "shape": [4, 8], "dtype": "f32"},
                           {"name": "b", "shape": [16], "dtype": "f32"}]
    assert [o["shape"] for o in m["outputs"]] == [[4, 16], [4, 16]]
    assert m["arena_bytes"] == small.native.arena_bytes
    assert m["weights_bytes"] == small.native.weights.nbytes >= 8 * 16 * 4
    assert m["target"]["key"] == Target.host().key()
    assert m["source_sha256"] == hashlib.sha256(small.source.encode()).hexdigest()
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == ["graph.mlir", "manifest.json", "model.c", "model.so", "weights.bin"]
        assert zf.read("model.c").decode() == small.source
        assert hashlib.sha256(zf.read("model.so")).hexdigest() == m["library_sha256"]


def test_load_in_process_gives_identical_outputs_and_takes_threads(small, tmp_path):
    path = tmp_path / "small.tfm"
    small.save(path)
    loaded = tensorforge.load(path, threads=2)
    assert loaded.threads == 2 and loaded.module is None
    assert [str(t) for t in loaded.output_types] == ["tensor<4x16xf32>"] * 2
    x, b = models.inputs(5)
    for got, want in zip(loaded(x, b), small(x, b)):
        np.testing.assert_array_equal(got, want)
    loaded.save(tmp_path / "again.tfm")                          # a loaded model saves again
    np.testing.assert_array_equal(tensorforge.load(tmp_path / "again.tfm")(x, b)[1], small(x, b)[1])


def _rewrite_manifest(src: Path, dst: Path, **target_changes) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "manifest.json":
                m = json.loads(data)
                m["target"].update(target_changes)
                data = json.dumps(m).encode()
            zout.writestr(item, data)


def test_other_target_key_recompiles_from_the_saved_c(small, tmp_path):
    _rewrite_manifest(_saved(small, tmp_path), tmp_path / "foreign.tfm", key="x86_64-avx2-haswell-8c-0000")
    with pytest.warns(RuntimeWarning, match="compiling its saved C for this machine"):
        loaded = tensorforge.load(tmp_path / "foreign.tfm")
    assert loaded.native.build["origin"] == "recompiled"
    x, b = models.inputs(6)
    np.testing.assert_array_equal(loaded(x, b)[0], small(x, b)[0])


def test_without_a_compiler_an_incompatible_library_is_a_clear_error(small, tmp_path):
    _rewrite_manifest(_saved(small, tmp_path), tmp_path / "arm.tfm", key="aarch64-neon-native-4c-0000",
                      arch="aarch64")
    code = f"""
        import tensorforge
        try:
            tensorforge.load({str(tmp_path / "arm.tfm")!r})
        except tensorforge.TensorforgeError as e:
            print("ERROR", e)
    """
    proc = run_child(code, tmp_path, CC="/nonexistent/cc")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ERROR" in proc.stdout and "architecture aarch64" in proc.stdout and "no C compiler" in proc.stdout


def test_without_a_compiler_a_compatible_library_still_loads(small, tmp_path):
    x, b = models.inputs(7)
    outs, stdout = _round_trip(small, [x, b], tmp_path, CC="/nonexistent/cc")
    assert "ORIGIN artifact" in stdout
    np.testing.assert_array_equal(outs[1], small(x, b)[1])


def _saved(cm, tmp_path: Path) -> Path:
    path = tmp_path / "saved.tfm"
    cm.save(path)
    return path


def test_unreadable_artifacts_raise_tensorforge_errors(small, tmp_path):
    with pytest.raises(TensorforgeError, match="no model artifact at"):
        tensorforge.load(tmp_path / "missing.tfm")
    (tmp_path / "junk.tfm").write_bytes(b"not a zip")
    with pytest.raises(TensorforgeError, match="not a tensorforge model artifact"):
        tensorforge.load(tmp_path / "junk.tfm")
    future = tmp_path / "future.tfm"
    with zipfile.ZipFile(_saved(small, tmp_path)) as zin, zipfile.ZipFile(future, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item)
            if item.filename == "manifest.json":
                data = json.dumps({**json.loads(data), "format_version": 99}).encode()
            zout.writestr(item, data)
    with pytest.raises(TensorforgeError, match="upgrade tensorforge"):
        tensorforge.load(future)


def test_damaged_or_incomplete_artifacts_raise_tensorforge_errors(small, tmp_path):
    saved = _saved(small, tmp_path)
    with zipfile.ZipFile(saved) as zin:
        members = {i.filename: zin.read(i) for i in zin.infolist()}
    incomplete = tmp_path / "incomplete.tfm"
    with zipfile.ZipFile(incomplete, "w") as zout:
        for name, data in members.items():
            if name != "weights.bin":
                zout.writestr(name, data)
    with pytest.raises(TensorforgeError, match="incomplete.*weights.bin"):
        tensorforge.load(incomplete)
    damaged = tmp_path / "damaged.tfm"
    raw = bytearray(saved.read_bytes())
    blob = members["weights.bin"]
    at = raw.find(blob[:64])                     # flip a byte of the stored (uncompressed) weights
    raw[at + 100] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    with pytest.raises(TensorforgeError, match="damaged"):
        tensorforge.load(damaged)
