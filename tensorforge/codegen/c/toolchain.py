"""Compile generated C into a shared library, cached on disk by content hash.

Compiling a model twice must not run the C compiler twice: the library is stored under
``$TENSORFORGE_CACHE`` (default ``~/.cache/tensorforge``) named by a hash of the source, the flags
and the compiler version, and loaded from there. Files appear atomically (written under a unique
temporary name, then renamed), so processes compiling the same source at once each get a whole
library and never a half-written one. ``stats`` counts hits, misses and compiler runs so callers
and tests can prove that a warm compile ran no compiler.

Compiling and linking are two compiler runs. With ``-ffast-math`` (or ``-Ofast``) on the *link*
command, gcc links ``crtfastmath.o`` into the shared library, whose constructor turns on
flush-to-zero and denormals-are-zero for the whole process as soon as the library is loaded:
NumPy, torch and every other library in the process would then silently lose denormals. So the
source is compiled with every flag (``-c``) and the object linked without the fast-math ones.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ...errors import CompileError
from ..target import Target, compiler_version

_ERROR_LINES = 12
# Bumped whenever the way a library is built changes, so that libraries built the old way (e.g.
# linked with crtfastmath.o) are not taken from the cache.
_RECIPE = "compile-then-link-v2"
# Flags that make gcc link crtfastmath.o (which sets FTZ/DAZ process-wide on load).
FAST_MATH_FLAGS = frozenset({"-ffast-math", "-Ofast", "-funsafe-math-optimizations"})
_lock = threading.Lock()
_loaded: dict[Path, ctypes.CDLL] = {}


@dataclass
class CompileStats:
    """Counters since the process started (or since ``reset``)."""

    hits: int = 0
    misses: int = 0
    compiler_runs: int = 0

    def reset(self) -> None:
        self.hits = self.misses = self.compiler_runs = 0


stats = CompileStats()


@dataclass(frozen=True)
class CompiledLibrary:
    """A loaded shared library and where it came from."""

    lib: ctypes.CDLL
    path: Path           # the .so in the cache
    source_path: Path    # the .c beside it, kept for debugging and error messages
    digest: str
    cache_hit: bool      # True when no compiler ran for this call

    def function(self, name: str, argtypes: list | None = None, restype=None):
        """A ctypes function from the library with its signature set."""
        try:
            fn = getattr(self.lib, name)
        except AttributeError as exc:
            raise CompileError(f"symbol {name!r} not found in {self.path} (generated source: {self.source_path})") from exc
        if argtypes is not None:
            fn.argtypes = argtypes
        fn.restype = restype
        return fn


def cache_dir() -> Path:
    """Root of the on-disk cache; read on every call so tests can point it elsewhere."""
    root = os.environ.get("TENSORFORGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tensorforge")
    return Path(root)


def source_digest(source: str, target: Target, extra_flags: tuple[str, ...] = ()) -> str:
    """Hash of everything that decides the library's bytes."""
    h = hashlib.sha256()
    for part in (source, target.cc, compiler_version(target.cc), " ".join(target.compile_flags), " ".join(extra_flags),
                 _RECIPE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _first_errors(stderr: str) -> str:
    """The first diagnostics that say ``error`` (with the lines after each), else the head of stderr."""
    lines = stderr.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if "error" in line.lower():
            picked.extend(lines[i:i + 3])
        if len(picked) >= _ERROR_LINES:
            break
    return "\n".join((picked or lines)[:_ERROR_LINES])


def compile_command(source_path: Path, object_path: Path, target: Target, extra_flags: tuple[str, ...] = ()) -> list[str]:
    """The compiler run that turns the source into an object file (all code generation flags)."""
    flags = [f for f in target.cflags if f != "-shared"]
    return [*shlex.split(target.cc), *flags, f"-march={target.march}", *extra_flags, "-c", str(source_path),
            "-o", str(object_path)]


def link_command(object_path: Path, out_path: Path, target: Target) -> list[str]:
    """The compiler run that links the object into a shared library, without the fast-math flags
    (see the module docstring: they would link crtfastmath.o)."""
    flags = [f for f in target.cflags if f not in FAST_MATH_FLAGS]
    if "-shared" not in flags:
        flags.append("-shared")
    return [*shlex.split(target.cc), *flags, str(object_path), "-o", str(out_path), *target.ldflags]


def _run(cmd: list[str], target: Target, name: str, source_path: Path, what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(f"cannot run C compiler {target.cc!r} for kernel {name!r}: {exc}; install gcc or set $CC") from exc
    if proc.returncode != 0:
        raise CompileError(
            f"C {what} of kernel {name!r} failed (exit {proc.returncode}); generated source kept at "
            f"{source_path}\ncommand: {shlex.join(cmd)}\n{_first_errors(proc.stderr)}")


def _run_compiler(source_path: Path, out_path: Path, target: Target, extra_flags: tuple[str, ...], name: str) -> None:
    fd, tmp_so = tempfile.mkstemp(dir=out_path.parent, prefix=out_path.name + ".", suffix=".tmp")
    os.close(fd)
    tmp_o = tmp_so + ".o"
    try:
        _run(compile_command(source_path, Path(tmp_o), target, extra_flags), target, name, source_path, "compilation")
        _run(link_command(Path(tmp_o), Path(tmp_so), target), target, name, source_path, "link")
        os.replace(tmp_so, out_path)
    except BaseException:
        _unlink_quietly(tmp_so)
        raise
    finally:
        _unlink_quietly(tmp_o)


def _load(path: Path, source_path: Path, name: str) -> ctypes.CDLL:
    with _lock:
        lib = _loaded.get(path)
        if lib is None:
            try:
                lib = ctypes.CDLL(str(path))
            except OSError as exc:
                raise CompileError(f"cannot load library of kernel {name!r} from {path} (source {source_path}): "
                                   f"{exc}") from exc
            _loaded[path] = lib
    return lib


def compile_c(source: str, target: Target | None = None, name: str = "kernel",
              extra_flags: tuple[str, ...] = ()) -> CompiledLibrary:
    """Build ``source`` for ``target`` (default: the host) and load it; reuse the cached build if any.

    ``name`` only labels the files and error messages (e.g. the kernel or model being built).
    Raises ``CompileError`` with the compiler's first error lines and the kept source path.
    """
    target = target or Target.host()
    digest = source_digest(source, target, tuple(extra_flags))
    folder = cache_dir() / "c" / digest[:2]
    stem = f"{_safe(name)}-{digest[:24]}"
    so_path, c_path = folder / f"{stem}.so", folder / f"{stem}.c"
    hit = so_path.exists()
    _count(hit)
    if not hit:
        _build(source, c_path, so_path, target, tuple(extra_flags), name)
    try:
        lib = _load(so_path, c_path, name)
    except CompileError:
        if not hit:
            raise
        # A cached file that does not load (foreign or damaged): build it again, once.
        _unlink_quietly(so_path)
        _count(False)
        _build(source, c_path, so_path, target, tuple(extra_flags), name)
        lib, hit = _load(so_path, c_path, name), False
    return CompiledLibrary(lib=lib, path=so_path, source_path=c_path, digest=digest, cache_hit=hit)


def _count(hit: bool) -> None:
    with _lock:
        if hit:
            stats.hits += 1
        else:
            stats.misses += 1
            stats.compiler_runs += 1


def _build(source: str, c_path: Path, so_path: Path, target: Target, extra_flags: tuple[str, ...], name: str) -> None:
    try:
        c_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(c_path, source)
    except OSError as exc:
        raise CompileError(f"cannot write the source of kernel {name!r} to {c_path}: {exc}; "
                           "point $TENSORFORGE_CACHE at a writable folder") from exc
    _run_compiler(c_path, so_path, target, extra_flags, name)


def _safe(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    return cleaned[:48] or "kernel"
