"""``.tfm`` artifacts: a compiled model in one file that runs without the compiler's frontends.

An artifact is a zip (stored, not compressed: weights do not compress) holding

    manifest.json   format version, tensorforge version, inputs/outputs (names, shapes, dtypes),
                    arena size, weight size, the target the library was built for, hashes;
                    for a model with symbolic dims (format 2) also "symbols" (each symbol's
                    range, divisor and hint) and "dynamic_plan" (the arena plan as data)
    model.so        the compiled library
    model.c         the generated C it was compiled from
    weights.bin     the weight blob (offsets are baked into the C)
    graph.mlir      optional: the optimised graph-level module as MLIR text with its constants
                    inline, so that ``explain`` and ``tune`` can work from a .tfm file alone

Loading needs NumPy and ctypes only: not torch, not onnx, and not a C compiler when the
library fits this machine.  It fits when its target key equals this machine's.  When it does
not and a compiler is present, the saved C is compiled for this machine (through the usual
cache) and a warning says so.  Without a compiler the key cannot be computed; then the library
is used when this CPU has the architecture and every ISA feature it was built with, and
anything else is an error that says what differs.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..codegen.target import KNOWN_FEATURES
from ..errors import CompileError, TensorforgeError
from ..ir.symbolic import SymbolTable
from .arena_plan import DynamicPlan
from .buffers import aligned_empty
from .native import NativeModel, load_library
from .signature import TensorSpec

FORMAT = "tensorforge-model"
FORMAT_VERSION = 2                # 2: symbolic dims; static models are still written as format 1
STATIC_FORMAT_VERSION = 1         # so that older tensorforge versions keep loading static artifacts
MANIFEST, LIBRARY, SOURCE, WEIGHTS, GRAPH = "manifest.json", "model.so", "model.c", "weights.bin", "graph.mlir"
_CHUNK = 16 << 20


def _version() -> str:
    from .. import __version__
    return __version__


def manifest_of(model: NativeModel) -> dict[str, Any]:
    """The JSON manifest describing ``model``."""
    if model.source is None or model.library_path is None:
        raise TensorforgeError("this model has no library or generated source to save")
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION if model.is_dynamic else STATIC_FORMAT_VERSION,
        "tensorforge_version": _version(),
        "inputs": [s.to_json() for s in model.inputs],
        "outputs": [s.to_json() for s in model.outputs],
        "arena_bytes": model.arena_bytes,
        "weights_bytes": int(model.weights.nbytes),
        "target": model.build.get("target", {}),
        "source_sha256": hashlib.sha256(model.source.encode()).hexdigest(),
        "cache_digest": model.build.get("digest"),
    }
    if model.is_dynamic:
        manifest["symbols"] = model.symbols.to_json()
        manifest["dynamic_plan"] = model.plan.to_json()
    return manifest


def save(model: NativeModel, path: str | os.PathLike, graph_text: str | None = None) -> Path:
    """Writes ``model`` to ``path`` (atomically: a reader never sees half a file), with the
    graph-level module's text when ``graph_text`` is given."""
    path = Path(path)
    manifest = manifest_of(model)
    library = Path(model.library_path).read_bytes()
    manifest["library_sha256"] = hashlib.sha256(library).hexdigest()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            zf.writestr(SOURCE, model.source)
            zf.writestr(LIBRARY, library)
            if graph_text is not None:
                zf.writestr(GRAPH, graph_text)
            with zf.open(WEIGHTS, "w", force_zip64=True) as w:
                w.write(memoryview(model.weights))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def read_graph(path: str | os.PathLike) -> str | None:
    """The graph-level module text saved with the model, or None when it was saved without."""
    with _open(path) as zf:
        _manifest(zf, path)
        return zf.read(GRAPH).decode() if GRAPH in zf.namelist() else None


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    with _open(path) as zf:
        return _manifest(zf, path)


def load(path: str | os.PathLike, threads: int | None = None) -> NativeModel:
    """The model saved at ``path``, ready to run (see the module docstring for target checks)."""
    with _open(path) as zf:
        manifest = _manifest(zf, path)
        try:
            source = zf.read(SOURCE).decode()
            lib_path, origin = _library_for_this_machine(zf, manifest, source, path)
            weights = _read_weights(zf, int(manifest["weights_bytes"]))
        except KeyError as exc:           # zipfile's "There is no item named ..."
            raise TensorforgeError(f"{path} is incomplete: {exc.args[0]}") from None
        except zipfile.BadZipFile as exc:   # e.g. a CRC mismatch
            raise TensorforgeError(f"{path} is damaged: {exc}") from None
    lib = load_library(lib_path)
    build = {"target": manifest["target"], "digest": manifest.get("cache_digest"), "origin": origin,
             "artifact": str(path)}
    plan = manifest.get("dynamic_plan")
    return NativeModel(lib, [TensorSpec.from_json(s) for s in manifest["inputs"]],
                       [TensorSpec.from_json(s) for s in manifest["outputs"]], weights,
                       int(manifest["arena_bytes"]), threads=threads, library_path=Path(lib_path),
                       source=source, build=build, symbols=SymbolTable.from_json(manifest.get("symbols", [])),
                       plan=DynamicPlan.from_json(plan) if plan is not None else None)


def _open(path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise TensorforgeError(f"no model artifact at {path}") from None
    except (zipfile.BadZipFile, IsADirectoryError, OSError) as exc:
        raise TensorforgeError(f"{path} is not a tensorforge model artifact (.tfm): {exc}") from None


def _manifest(zf: zipfile.ZipFile, path) -> dict[str, Any]:
    try:
        manifest = json.loads(zf.read(MANIFEST))
    except KeyError:
        raise TensorforgeError(f"{path} is not a tensorforge model artifact: it has no {MANIFEST}") from None
    if manifest.get("format") != FORMAT:
        raise TensorforgeError(f"{path}: unknown artifact format {manifest.get('format')!r}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise TensorforgeError(f"{path} was written by tensorforge {manifest.get('tensorforge_version')} "
                               f"(format {version}); this is tensorforge {_version()} (format "
                               f"{FORMAT_VERSION}): upgrade tensorforge to load it")
    return manifest


def _read_weights(zf: zipfile.ZipFile, nbytes: int) -> np.ndarray:
    """The blob straight into an aligned buffer (zipfile checks its CRC at the end of the stream)."""
    blob = aligned_empty(max(nbytes, 64))
    view = memoryview(blob)
    pos = 0
    with zf.open(WEIGHTS) as f:
        while pos < nbytes:
            chunk = f.read(min(_CHUNK, nbytes - pos))
            if not chunk:
                break
            view[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        if pos != nbytes or f.read(1):
            raise TensorforgeError(f"the artifact's {WEIGHTS} has the wrong size (manifest says {nbytes} bytes)")
    return blob


# ---- which library to run ------------------------------------------------------------------
def _host_key() -> tuple[Any, str | None]:
    """(host Target, its key), the key None when no C compiler can run here."""
    from ..codegen.target import Target
    host = Target.host()
    try:
        return host, host.key()
    except CompileError:
        return host, None


def _library_for_this_machine(zf: zipfile.ZipFile, manifest: dict, source: str, path) -> tuple[Path, str]:
    saved = manifest.get("target") or {}
    host, key = _host_key()
    if key is not None and key == saved.get("key"):
        return _extract_library(zf, manifest), "artifact"
    if key is not None:
        from ..codegen.c.toolchain import compile_c
        warnings.warn(f"{path} was built for target {saved.get('key')}, this machine is {key}: "
                      f"compiling its saved C for this machine", RuntimeWarning, stacklevel=3)
        return compile_c(source, host, name="model").path, "recompiled"
    missing = sorted((set(saved.get("features", ())) & KNOWN_FEATURES) - set(host.features))
    if saved.get("arch") != host.arch or missing:
        why = (f"architecture {saved.get('arch')} (this machine: {host.arch})" if saved.get("arch") != host.arch
               else f"CPU features this machine lacks: {', '.join(missing)}")
        raise TensorforgeError(f"{path} was built for target {saved.get('key')}, which needs {why}; no C "
                               f"compiler is available to rebuild its saved C here: install gcc (or set $CC) "
                               f"or save the model on a machine like this one")
    return _extract_library(zf, manifest), "artifact"


def _extract_library(zf: zipfile.ZipFile, manifest: dict) -> Path:
    """The artifact's library as a file dlopen can read: content-addressed in the cache, so loading
    the same artifact twice maps one library; a temporary file when the cache is not writable."""
    data = zf.read(LIBRARY)
    digest = hashlib.sha256(data).hexdigest()
    expected = manifest.get("library_sha256")
    if expected and expected != digest:
        raise TensorforgeError(f"the artifact's {LIBRARY} is damaged (sha256 {digest[:12]}, manifest says "
                               f"{expected[:12]})")
    from ..codegen.c.toolchain import cache_dir
    folder = cache_dir() / "artifacts" / digest[:2]
    target = folder / f"model-{digest[:24]}.so"
    try:
        if target.read_bytes() == data:       # cheap next to the weights; catches a damaged cache file
            return target
    except OSError:
        pass
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return _write_atomically(folder, target, data)
    except OSError:
        return _write_atomically(Path(tempfile.gettempdir()), Path(tempfile.gettempdir()) / target.name, data)


def _write_atomically(folder: Path, target: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=target.name + ".", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, target)
    return target
