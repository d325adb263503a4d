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

A source may hold **translation units** of its own between ``UNIT_BEGIN`` and ``UNIT_END`` lines
(``unit(text)`` wraps one): code that many models share word for word, such as the GEMM
micro-kernels. Each distinct unit is compiled on its own into an object file cached by its hash
(so the next model, or the next compile of this one, reuses it), the rest of the source is the
main unit, and the units compile in parallel, one compiler per core, before one link. The source
stays one self-contained text: building it again elsewhere (an artifact on another machine) goes
through the same split. Symbols a unit shares with the main unit are declared ``TF_API`` (hidden
visibility) there, so two models loaded in one process never see each other's copies.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shlex
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ...errors import CompileError
from ..target import Target, compiler_version

_ERROR_LINES = 12
# Bumped whenever the way a library is built changes, so that libraries built the old way (e.g.
# linked with crtfastmath.o) are not taken from the cache.
_RECIPE = "compile-then-link-v3-units"
UNIT_BEGIN = "/*@tf-unit-begin*/"
UNIT_END = "/*@tf-unit-end*/"
_UNIT_API = '#define TF_API __attribute__((visibility("hidden")))\n'

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
    unit_hits: int = 0       # translation units found compiled in the cache
    unit_runs: int = 0       # translation units compiled

    def reset(self) -> None:
        self.hits = self.misses = self.compiler_runs = self.unit_hits = self.unit_runs = 0


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


def unit(text: str) -> str:
    """``text`` (a self-contained C translation unit) marked to be compiled on its own and cached;
    its ``TF_API`` functions are hidden outside the library."""
    return f"\n{UNIT_BEGIN}\n{_UNIT_API}{text}\n{UNIT_END}\n"


def split_units(source: str) -> tuple[str, list[str]]:
    """(main unit, distinct marked units in order of first appearance)."""
    if UNIT_BEGIN not in source:
        return source, []
    main: list[str] = []
    units: dict[str, None] = {}
    pos = 0
    while True:
        start = source.find(UNIT_BEGIN, pos)
        if start < 0:
            main.append(source[pos:])
            break
        end = source.find(UNIT_END, start)
        if end < 0:
            raise CompileError(f"a translation unit opened by {UNIT_BEGIN} at offset {start} is never closed")
        main.append(source[pos:start])
        units.setdefault(source[start + len(UNIT_BEGIN):end].strip("\n") + "\n", None)
        pos = end + len(UNIT_END)
    return "".join(main), list(units)


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


def link_command(object_path: Path | list[Path], out_path: Path, target: Target) -> list[str]:
    """The compiler run that links the object into a shared library, without the fast-math flags
    (see the module docstring: they would link crtfastmath.o)."""
    flags = [f for f in target.cflags if f not in FAST_MATH_FLAGS]
    if "-shared" not in flags:
        flags.append("-shared")
    objects = object_path if isinstance(object_path, list) else [object_path]
    return [*shlex.split(target.cc), *flags, *map(str, objects), "-o", str(out_path), *target.ldflags]


def _run(cmd: list[str], target: Target, name: str, source_path: Path, what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise CompileError(f"cannot run C compiler {target.cc!r} for kernel {name!r}: {exc}; install gcc or set $CC") from exc
    if proc.returncode != 0:
        raise CompileError(
            f"C {what} of kernel {name!r} failed (exit {proc.returncode}); generated source kept at "
            f"{source_path}\ncommand: {shlex.join(cmd)}\n{_first_errors(proc.stderr)}")


def _run_compiler(source_path: Path, out_path: Path, target: Target, extra_flags: tuple[str, ...], name: str,
                  units: list[str] = ()) -> None:
    """Compile the main unit at ``source_path`` and every unit (cached objects), in parallel, then link."""
    fd, tmp_so = tempfile.mkstemp(dir=out_path.parent, prefix=out_path.name + ".", suffix=".tmp")
    os.close(fd)
    tmp_o = tmp_so + ".o"
    try:
        def main() -> Path:
            _run(compile_command(source_path, Path(tmp_o), target, extra_flags), target, name, source_path,
                 "compilation")
            return Path(tmp_o)

        jobs = [main] + [lambda u=u: _unit_object(u, target, extra_flags, name) for u in units]
        if len(jobs) == 1:
            objects = [main()]
        else:
            with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
                objects = [f.result() for f in [pool.submit(job) for job in jobs]]
        _run(link_command(objects, Path(tmp_so), target), target, name, source_path, "link")
        os.replace(tmp_so, out_path)
    except BaseException:
        _unlink_quietly(tmp_so)
        raise
    finally:
        _unlink_quietly(tmp_o)


def _unit_object(text: str, target: Target, extra_flags: tuple[str, ...], name: str) -> Path:
    """The cached object file of one translation unit (compiled when missing)."""
    digest = source_digest(text, target, extra_flags)
    folder = cache_dir() / "c" / "units" / digest[:2]
    obj, src = folder / f"unit-{digest[:24]}.o", folder / f"unit-{digest[:24]}.c"
    with _lock:
        stats.unit_hits += obj.exists()
    if obj.exists():
        return obj
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _atomic_write(src, text)
    except OSError as exc:
        raise CompileError(f"cannot write a translation unit of kernel {name!r} to {src}: {exc}; "
                           "point $TENSORFORGE_CACHE at a writable folder") from exc
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=obj.name + ".", suffix=".tmp.o")
    os.close(fd)
    try:
        _run(compile_command(src, Path(tmp), target, extra_flags), target, name, src, "compilation")
        os.replace(tmp, obj)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    with _lock:
        stats.unit_runs += 1
    return obj


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
    main, units = split_units(source)
    main_path = c_path.with_suffix(".main.c") if units else c_path
    try:
        c_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(c_path, source)
        if units:
            _atomic_write(main_path, main)
    except OSError as exc:
        raise CompileError(f"cannot write the source of kernel {name!r} to {c_path}: {exc}; "
                           "point $TENSORFORGE_CACHE at a writable folder") from exc
    _run_compiler(main_path, so_path, target, extra_flags, name, units)


def _safe(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    return cleaned[:48] or "kernel"
