"""``.tfm`` artifacts: a compiled model in one file that runs without the compiler's frontends.

An artifact is a zip (stored, not compressed: weights do not compress) holding

    manifest.json   format version, tensorforge version, inputs/outputs (names, shapes, dtypes),
                    arena size, weight size, the target the library was built for, and
                    "members": the size and SHA-256 of every other member;
                    for a model with symbolic dims (format 2) also "symbols" (each symbol's
                    range, divisor and hint) and "dynamic_plan" (the arena plan as data)
    model.so        the compiled library
    model.c         the generated C it was compiled from
    weights.bin     the weight blob (offsets are baked into the C)
    graph.mlir      optional: the optimised graph-level module as MLIR text with its constants
                    inline, so that ``explain`` and ``tune`` can work from a .tfm file alone

Loading a ``.tfm`` runs native code from the file, as unpickling does: load only files you
trust.  Before anything from the file runs (the library, or the compiler on its C), every member
is read and checked against the manifest (its size and SHA-256), and the manifest itself against
the CRC-32 the zip stores for it, which catches every damaged byte up to 32 in a row; a
member the manifest does not list, a missing one, a truncated file or one that is no zip at all
is an ``ArtifactError`` naming the problem.  The manifest's digests catch damage, not an
attacker who rewrites them too: ``load(path, sha256=...)`` pins the whole file's digest for that.
Artifacts saved before "members" existed (same formats 1 and 2) still load, checked against the
digests they recorded (library and source) and the zip's CRC-32s.

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
import re
import struct
import tempfile
import warnings
import zipfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

import numpy as np

from ..codegen.target import KNOWN_FEATURES
from ..errors import ArtifactError, CompileError, ResourceError, TensorforgeError
from ..ir.symbolic import SymbolTable
from .arena_plan import DynamicPlan
from .buffers import allocate
from .native import NativeModel, load_library
from .signature import TensorSpec

FORMAT = "tensorforge-model"
FORMAT_VERSION = 2                # 2: symbolic dims; static models are still written as format 1
STATIC_FORMAT_VERSION = 1         # so that older tensorforge versions keep loading static artifacts
MANIFEST, LIBRARY, SOURCE, WEIGHTS, GRAPH = "manifest.json", "model.so", "model.c", "weights.bin", "graph.mlir"
REQUIRED = (SOURCE, LIBRARY, WEIGHTS)
_CHUNK = 16 << 20
_REDO = "recompile and save the model again, or download the file again"
# What zipfile raises on a damaged archive besides BadZipFile: a header field read as a size or
# an offset that makes no sense, a flag asking for a password, an unknown compression method.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, struct.error, ValueError,
               NotImplementedError, RuntimeError, zlib.error, OSError)
# The manifest fields loading relies on, with their JSON types.
_FIELDS = {"inputs": list, "outputs": list, "arena_bytes": int, "weights_bytes": int, "target": dict}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _version() -> str:
    from .. import __version__
    return __version__


def manifest_of(model: NativeModel) -> dict[str, Any]:
    """The JSON manifest describing ``model`` (``save`` adds the members' digests)."""
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
    graph-level module's text when ``graph_text`` is given; a full disk or an unwritable folder is
    a ``ResourceError`` and leaves nothing behind."""
    path = Path(path)
    manifest = manifest_of(model)
    members: dict[str, bytes | memoryview] = {SOURCE: model.source.encode(), LIBRARY: _library_bytes(model)}
    if graph_text is not None:
        members[GRAPH] = graph_text.encode()
    members[WEIGHTS] = memoryview(model.weights).cast("B")
    manifest["library_sha256"] = hashlib.sha256(members[LIBRARY]).hexdigest()   # what older loaders check
    manifest["members"] = {name: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                           for name, data in members.items()}
    try:
        _write_zip(path, manifest, members)
    except OSError as exc:
        from ..codegen.c.toolchain import OUT_OF_SPACE
        full = exc.errno in OUT_OF_SPACE
        raise ResourceError(f"cannot save the model to {path}: {exc.strerror or exc}; "
                            f"{'free some space there, or ' if full else ''}save it to a writable folder") from exc
    return path


def _library_bytes(model: NativeModel) -> bytes:
    try:
        return Path(model.library_path).read_bytes()
    except OSError as exc:
        raise TensorforgeError(f"cannot read the model's library {model.library_path} ({exc.strerror or exc}; was "
                               f"the cache cleaned?): compile the model again, then save it") from exc


def _write_zip(path: Path, manifest: dict[str, Any], members: dict[str, bytes | memoryview]) -> None:
    """The archive under a temporary name beside ``path``, renamed into place when whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr(MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            for name, data in members.items():
                with zf.open(name, "w", force_zip64=name == WEIGHTS) as w:
                    w.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_graph(path: str | os.PathLike) -> str | None:
    """The graph-level module text saved with the model (checked against the manifest), or None
    when it was saved without."""
    with _open(path) as zf:
        records = _member_records(zf, _manifest(zf, path), path)
        return _read_bytes(zf, GRAPH, records, path).decode() if GRAPH in records else None


def read_manifest(path: str | os.PathLike) -> dict[str, Any]:
    with _open(path) as zf:
        return _manifest(zf, path)


def load(path: str | os.PathLike, threads: int | None = None, sha256: str | None = None) -> NativeModel:
    """The model saved at ``path``, ready to run (see the module docstring for target checks).

    This runs native code from the file: load only artifacts you trust, and pin the file you
    trust with ``sha256`` (its SHA-256 as 64 hex digits, e.g. from ``sha256sum``); a file with
    another digest is an ``ArtifactError`` before anything from it is read further.  Every
    member is checked against the manifest before the library is loaded or compiled."""
    pin = _pin(sha256) if sha256 is not None else None
    contents = _read_verified(path, pin)
    lib_path, origin = _library_for_this_machine(contents, path)
    lib = load_library(lib_path)
    return _native_model(contents, lib, lib_path, origin, threads, path)


# ---- reading and checking ------------------------------------------------------------------
@dataclass
class _Contents:
    """What loading takes from an artifact, every member checked against the manifest."""

    manifest: dict[str, Any]
    source: str
    library: bytes
    weights: np.ndarray


def _read_verified(path, pin: str | None) -> _Contents:
    """Reads every member once, checking each against the manifest (a member only checked, such as
    the graph, is streamed and dropped)."""
    with _open(path, pin) as zf:
        manifest = _manifest(zf, path)
        records = _member_records(zf, manifest, path)
        source = _read_bytes(zf, SOURCE, records, path)
        library = _read_bytes(zf, LIBRARY, records, path)
        weights = _read_weights(zf, records, manifest["weights_bytes"], path)
        for name in sorted(records.keys() - set(REQUIRED)):
            _stream(zf, name, records[name], path)
    try:
        text = source.decode()
    except UnicodeDecodeError as exc:            # possible only where no digest was recorded
        raise _damaged(path, SOURCE, f"not UTF-8 text: {exc}") from None
    return _Contents(manifest, text, library, weights)


def _pin(sha256: Any) -> str:
    """The pinned digest in lower case, or an error for an argument that cannot be one."""
    if isinstance(sha256, str) and _SHA256.fullmatch(sha256.strip().lower()):
        return sha256.strip().lower()
    raise TensorforgeError(f"sha256= takes the file's SHA-256 as 64 hex digits (what `sha256sum model.tfm` "
                           f"prints), got {sha256!r:.80}")


@contextmanager
def _open(path, pin: str | None = None) -> Iterator[zipfile.ZipFile]:
    """The artifact as a zip, after its whole-file digest when one is pinned. One open file
    throughout, so the bytes that were pinned are the bytes that are read."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise ArtifactError(f"no model artifact at {path}") from None
    except IsADirectoryError:
        raise ArtifactError(f"{path} is a folder, not a tensorforge model artifact (.tfm)") from None
    except OSError as exc:
        raise ArtifactError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        if pin is not None:
            _check_pin(f, pin, path)
        try:
            zf = zipfile.ZipFile(f)
        except _ZIP_ERRORS as exc:
            raise ArtifactError(f"{path} is not a tensorforge model artifact (.tfm), or it is truncated (an "
                                f"interrupted copy or download?): {_one_line(exc)}; {_REDO}") from None
        with zf:
            yield zf


def _check_pin(f: BinaryIO, pin: str, path) -> None:
    digest = hashlib.file_digest(f, "sha256").hexdigest()
    f.seek(0)
    if digest != pin:
        raise ArtifactError(f"{path} has sha256 {digest[:16]}..., not the pinned {pin[:16]}...: it is damaged, "
                            f"replaced or another version; download the pinned file again, or update the pin "
                            f"if you trust this one")


def _manifest(zf: zipfile.ZipFile, path) -> dict[str, Any]:
    """The manifest, read through the zip's CRC-32 check, in a format this version reads, with the
    fields loading relies on."""
    if MANIFEST not in zf.NameToInfo:
        raise ArtifactError(f"{path} is not a tensorforge model artifact: it has no {MANIFEST}")
    try:
        manifest = json.loads(zf.read(MANIFEST))
    except _ZIP_ERRORS as exc:                   # JSON and UTF-8 errors are ValueErrors
        raise _damaged(path, MANIFEST, _one_line(exc)) from None
    if not isinstance(manifest, dict):
        raise _damaged(path, MANIFEST, "not a JSON object")
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"{path}: unknown artifact format {manifest.get('format')!r}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ArtifactError(f"{path} was written by tensorforge {manifest.get('tensorforge_version')} "
                            f"(format {version}); this is tensorforge {_version()} (format "
                            f"{FORMAT_VERSION}): upgrade tensorforge to load it")
    for key, kind in _FIELDS.items():
        value = manifest.get(key)
        if not isinstance(value, kind) or (kind is int and value < 0):
            raise _damaged(path, MANIFEST, f"its {key!r} is missing or not a {kind.__name__}")
    return manifest


def _member_records(zf: zipfile.ZipFile, manifest: dict[str, Any], path) -> dict[str, dict]:
    """What each member must be ({"bytes", "sha256"}), checked against the archive's directory:
    every member present once, none the manifest does not list, every size as recorded."""
    names = [info.filename for info in zf.infolist()]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise _damaged(path, twice[0], "it is stored more than once")
    records = manifest.get("members")
    if records is None:
        records = _legacy_records(manifest, names)
    elif not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        raise _damaged(path, MANIFEST, "its 'members' record is malformed")
    for name in sorted(set(REQUIRED) | records.keys()):
        if name not in zf.NameToInfo:
            raise ArtifactError(f"{path} is incomplete: it has no {name}; {_REDO}")
    for name in names:
        if name != MANIFEST and name not in records:
            raise ArtifactError(f"{path} has a member {name!r} that its manifest does not list: the file was "
                                f"changed after it was saved; {_REDO}")
    for name, record in records.items():
        _check_size(zf, name, record.get("bytes"), path)
    _check_size(zf, WEIGHTS, manifest["weights_bytes"], path)     # what the weight buffer is sized from
    return records


def _check_size(zf: zipfile.ZipFile, name: str, expected: int | None, path) -> None:
    stored = zf.getinfo(name).file_size
    if expected is not None and stored != expected:
        raise _damaged(path, name, f"{stored} bytes, the manifest says {expected}")


def _legacy_records(manifest: dict[str, Any], names: list[str]) -> dict[str, dict]:
    """The records of an artifact saved before "members" existed: the digests it did record (the
    library's and the source's); the zip's CRC-32s guard the rest."""
    records: dict[str, dict] = {name: {} for name in names if name != MANIFEST}
    for name, key in ((LIBRARY, "library_sha256"), (SOURCE, "source_sha256")):
        if name in records and isinstance(manifest.get(key), str):
            records[name]["sha256"] = manifest[key]
    return records


def _stream(zf: zipfile.ZipFile, name: str, record: dict, path,
            sink: Callable[[int, bytes], None] | None = None) -> None:
    """Reads member ``name`` once, in chunks handed to ``sink`` with their offsets, and checks it
    against ``record``'s SHA-256 (zipfile checks its CRC-32 at the end of the stream)."""
    digest = hashlib.sha256()
    offset = 0
    try:
        with zf.open(name) as f:
            while chunk := f.read(_CHUNK):
                if sink is not None:
                    sink(offset, chunk)
                digest.update(chunk)
                offset += len(chunk)
    except _ZIP_ERRORS as exc:
        raise _damaged(path, name, _one_line(exc)) from None
    expected = record.get("sha256")
    if expected is not None and digest.hexdigest() != expected:
        raise _damaged(path, name, f"sha256 {digest.hexdigest()[:16]}..., the manifest says {str(expected)[:16]}...")


def _read_bytes(zf: zipfile.ZipFile, name: str, records: dict[str, dict], path) -> bytes:
    parts: list[bytes] = []
    _stream(zf, name, records[name], path, lambda _, chunk: parts.append(chunk))
    return b"".join(parts)


def _read_weights(zf: zipfile.ZipFile, records: dict[str, dict], nbytes: int, path) -> np.ndarray:
    """The blob straight into an aligned buffer (whose size the directory already confirmed), or a
    clear error when this machine does not have the memory for it."""
    blob = allocate(max(nbytes, 64), f"the weights of {path}", "free memory, or load it on a machine with more")
    view = memoryview(blob)

    def sink(offset: int, chunk: bytes) -> None:
        view[offset:offset + len(chunk)] = chunk

    _stream(zf, WEIGHTS, records[WEIGHTS], path, sink)
    return blob


def _damaged(path, name: str, detail: str) -> ArtifactError:
    return ArtifactError(f"{path}: its {name} is damaged ({detail}); {_REDO}")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _native_model(contents: _Contents, lib, lib_path: Path, origin: str, threads: int | None, path) -> NativeModel:
    """The runnable model; a manifest whose signature this version cannot read is an ArtifactError."""
    manifest = contents.manifest
    build = {"target": manifest["target"], "digest": manifest.get("cache_digest"), "origin": origin,
             "artifact": str(path)}
    try:
        inputs = [TensorSpec.from_json(s) for s in manifest["inputs"]]
        outputs = [TensorSpec.from_json(s) for s in manifest["outputs"]]
        symbols = SymbolTable.from_json(manifest.get("symbols", []))
        plan = manifest.get("dynamic_plan")
        plan = DynamicPlan.from_json(plan) if plan is not None else None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ArtifactError(f"{path}: its {MANIFEST} describes the model in a way this tensorforge cannot read "
                            f"({type(exc).__name__}: {_one_line(exc)}); {_REDO}") from None
    return NativeModel(lib, inputs, outputs, contents.weights, int(manifest["arena_bytes"]), threads=threads,
                       library_path=Path(lib_path), source=contents.source, build=build, symbols=symbols, plan=plan)


# ---- which library to run ------------------------------------------------------------------
def _host_key() -> tuple[Any, str | None]:
    """(host Target, its key), the key None when no C compiler can run here."""
    from ..codegen.target import Target
    host = Target.host()
    try:
        return host, host.key()
    except CompileError:
        return host, None


def _library_for_this_machine(contents: _Contents, path) -> tuple[Path, str]:
    saved = contents.manifest.get("target") or {}
    host, key = _host_key()
    if key is not None and key == saved.get("key"):
        return _extract_library(contents.library), "artifact"
    if key is not None:
        from ..codegen.c.toolchain import compile_c
        warnings.warn(f"{path} was built for target {saved.get('key')}, this machine is {key}: "
                      f"compiling its saved C for this machine", RuntimeWarning, stacklevel=3)
        return compile_c(contents.source, host, name="model").path, "recompiled"
    missing = sorted((set(saved.get("features", ())) & KNOWN_FEATURES) - set(host.features))
    if saved.get("arch") != host.arch or missing:
        why = (f"architecture {saved.get('arch')} (this machine: {host.arch})" if saved.get("arch") != host.arch
               else f"CPU features this machine lacks: {', '.join(missing)}")
        raise TensorforgeError(f"{path} was built for target {saved.get('key')}, which needs {why}; no C "
                               f"compiler is available to rebuild its saved C here: install gcc (or set $CC) "
                               f"or save the model on a machine like this one")
    return _extract_library(contents.library), "artifact"


def _extract_library(data: bytes) -> Path:
    """The artifact's library as a file dlopen can read: content-addressed in the cache, so loading
    the same artifact twice maps one library (the cache's fallback rules apply when it is not
    writable)."""
    from ..codegen.c import toolchain
    digest = hashlib.sha256(data).hexdigest()
    relative = Path("artifacts") / digest[:2] / f"model-{digest[:24]}.so"
    found = toolchain.cached_file(relative)
    if found is not None and _holds(found, data):      # cheap next to the weights; catches a damaged cache file
        return found
    return toolchain.write_cache_file(relative, data, "the library of a loaded .tfm")


def _holds(path: Path, data: bytes) -> bool:
    try:
        return path.read_bytes() == data
    except OSError:
        return False
