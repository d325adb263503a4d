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

What the machine lacks is an error that says what to do, not a traceback: no C compiler is a
``CompilerNotFoundError`` naming the compiler looked for; a full disk (or the compiler running out
of space) is a ``CacheWriteError``. A cache folder this process cannot write (read-only mount,
another user's folder) is not an error: what is already compiled there is still used, and what is
new is compiled into a temporary folder for this process, with one ``TensorforgeWarning``, so that
a server with a read-only cache keeps serving.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from ...errors import CacheWriteError, CompileError, CompilerNotFoundError, TensorforgeWarning
from ..target import Target, compiler_version, vector_width_flags, workaround_flags
from . import omp_runtime

_ERROR_LINES = 12
# Bumped whenever the way a library is built changes, so that libraries built the old way (e.g.
# linked with crtfastmath.o, or compiled without the vector width flag that the key already named)
# are not taken from the cache.
_RECIPE = "compile-then-link-v4-vector-width"
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

    def build_seconds(self) -> float:
        """How long the compiler took for this library, now or when it was cached (the ``.build_s``
        file ``_build`` writes beside it), so that a cache hit still says what a rebuild would cost;
        nan if unknown (a library cached before the file existed).  Read when asked: compiling a
        model reads no extra file."""
        try:
            return float(self.path.with_suffix(".build_s").read_text())
        except (OSError, ValueError):
            return float("nan")

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


# ---- writing into the cache ----------------------------------------------------------------
_T = TypeVar("_T")
# What writing a cache this process may not write fails with (a read-only mount, another user's
# folder): these fall back to a temporary folder. Anything else (a full disk, an I/O error, a file
# where the cache folder should be) is an error that says what to fix.
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
OUT_OF_SPACE = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
_fallbacks: dict[Path, Path] = {}      # configured cache root -> this process's temporary stand-in
_fallback_lock = threading.Lock()


def cache_roots() -> list[Path]:
    """The folders a cached file may be in, searched in order: this process's stand-in for an
    unwritable cache (holds only what this process built), then the configured cache."""
    root = cache_dir()
    fallback = _fallbacks.get(root)
    return [fallback, root] if fallback is not None else [root]


def cached_file(relative: Path) -> Path | None:
    """The first of ``cache_roots()`` holding ``relative``, or None."""
    for root in cache_roots():
        if (root / relative).exists():
            return root / relative
    return None


def in_writable_cache(write: Callable[[Path], _T], what: str) -> _T:
    """``write(root)`` with the cache root, or again with a temporary stand-in (and a warning) when
    this process cannot write the cache; a full disk or another failure is a ``CacheWriteError``
    naming ``what`` was being written, where, and what to do."""
    root = cache_dir()
    folder = _fallbacks.get(root, root)
    while True:
        try:
            return write(folder)
        except OSError as exc:
            if folder != root or exc.errno not in _NOT_WRITABLE:
                raise _cache_write_error(exc, what) from exc
            folder = _fallback_for(root, exc, what)


def write_cache_file(relative: Path, data: str | bytes, what: str) -> Path:
    """Writes ``data`` at ``relative`` in the writable cache (atomically) and returns its path."""
    def write(root: Path) -> Path:
        atomic_write(root / relative, data)
        return root / relative
    return in_writable_cache(write, what)


def _fallback_for(root: Path, exc: OSError, what: str) -> Path:
    """This process's stand-in for the unwritable cache ``root``: made and warned about once, removed
    at exit (the libraries in it stay mapped until then)."""
    with _fallback_lock:
        folder = _fallbacks.get(root)
        if folder is not None:
            return folder
        try:
            folder = Path(tempfile.mkdtemp(prefix="tensorforge-cache-"))
        except OSError as tmp_exc:
            raise CacheWriteError(
                f"cannot write {what}: the compile cache {root} is not writable ({_reason(exc)}) and neither "
                f"is the temporary folder {tempfile.gettempdir()} ({_reason(tmp_exc)}); point "
                f"$TENSORFORGE_CACHE at a writable folder") from exc
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _fallbacks[root] = folder
    warnings.warn(TensorforgeWarning(
        f"the compile cache {root} is not writable ({_reason(exc)}): this process writes what it compiles to "
        f"{folder} instead (removed at exit), so nothing compiled now is kept for the next one; point "
        f"$TENSORFORGE_CACHE at a writable folder (or fill this cache where it is writable) to avoid compiling "
        f"at every start"), stacklevel=3)
    return folder


def _cache_write_error(exc: OSError, what: str) -> CacheWriteError:
    where = exc.filename or cache_dir()
    if exc.errno in OUT_OF_SPACE:
        fix = "free some space there, or point $TENSORFORGE_CACHE at a folder on another disk"
    else:
        fix = "point $TENSORFORGE_CACHE at a writable folder"
    return CacheWriteError(f"cannot write {what} to {where}: {_reason(exc)}; {fix}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def source_digest(source: str, target: Target, extra_flags: tuple[str, ...] = ()) -> str:
    """Hash of everything that decides the library's bytes."""
    h = hashlib.sha256()
    for part in (source, target.cc, compiler_version(target.cc), " ".join(target.compile_flags), " ".join(extra_flags),
                 _RECIPE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def atomic_write(path: Path, data: str | bytes) -> None:
    """Writes ``data`` under a unique temporary name beside ``path`` (its folder made if missing),
    then renames it: a concurrent reader sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
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
    return [*shlex.split(target.cc), *flags, f"-march={target.march}", *workaround_flags(target.cc, target.march),
            *vector_width_flags(target.features), *extra_flags, "-c", str(source_path), "-o", str(object_path)]


def link_command(object_path: Path | list[Path], out_path: Path, target: Target, own_openmp: bool = False) -> list[str]:
    """The compiler run that links the object into a shared library, without the fast-math flags
    (see the module docstring: they would link crtfastmath.o).  ``own_openmp``: the objects hold
    tensorforge's OpenMP runtime (``omp_runtime``), so libgomp is left out and every symbol must
    be defined (``-z defs``): no OpenMP call may bind to another runtime at load time."""
    flags = [f for f in target.cflags if f not in FAST_MATH_FLAGS and not (own_openmp and f == "-fopenmp")]
    if "-shared" not in flags:
        flags.append("-shared")
    if own_openmp:
        flags += ["-pthread", "-Wl,-z,defs"]
    objects = object_path if isinstance(object_path, list) else [object_path]
    return [*shlex.split(target.cc), *flags, *map(str, objects), "-o", str(out_path), *target.ldflags]


def require_compiler(cc: str) -> str:
    """``cc``'s version line (part of every cache key), checked before anything is built so that a
    missing compiler is one ``CompilerNotFoundError`` saying what to do, not a failed kernel."""
    try:
        return compiler_version(cc)
    except CompileError as exc:
        if isinstance(exc.__cause__, OSError):       # it could not even start; other failures say why
            raise missing_compiler(cc, exc.__cause__) from exc
        raise


def missing_compiler(cc: str, exc: OSError) -> CompilerNotFoundError:
    """The error for a compiler that cannot be started, naming which one was looked for."""
    looked = (f"the C compiler $CC={cc!r}" if os.environ.get("CC") == cc
              else f"a C compiler (gcc or cc on $PATH, tried {cc!r})")
    return CompilerNotFoundError(
        f"no C compiler to build native code: {looked} cannot run ({_reason(exc)}); install one (e.g. "
        f"`apt install gcc`, `dnf install gcc`) or point $CC at one, or compile with target=\"interpreter\" "
        f"(needs no compiler, runs much slower)")


def _out_of_space(stderr: str) -> str | None:
    """The compiler's line saying the disk (or the quota) is full, if it said so."""
    return next((line.strip() for line in stderr.splitlines()
                 if "No space left on device" in line or "Disk quota exceeded" in line), None)


def _run(cmd: list[str], target: Target, name: str, source_path: Path, what: str) -> None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise missing_compiler(target.cc, exc) from exc
    full = _out_of_space(proc.stderr) if proc.returncode != 0 else None
    if full is not None:
        raise CacheWriteError(
            f"the C compiler ran out of disk space building kernel {name!r} ({full}): free some space in "
            f"{source_path.parent} and in {tempfile.gettempdir()}, or point $TENSORFORGE_CACHE and $TMPDIR at "
            f"folders on another disk")
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
        own_openmp = any(omp_runtime.MARK in u for u in units)
        _run(link_command(objects, Path(tmp_so), target, own_openmp), target, name, source_path, "link")
        os.replace(tmp_so, out_path)
    except BaseException:
        _unlink_quietly(tmp_so)
        raise
    finally:
        _unlink_quietly(tmp_o)


def _unit_object(text: str, target: Target, extra_flags: tuple[str, ...], name: str) -> Path:
    """The cached object file of one translation unit (compiled when missing)."""
    digest = source_digest(text, target, extra_flags)
    relative = Path("c") / "units" / digest[:2] / f"unit-{digest[:24]}.o"
    found = cached_file(relative)
    with _lock:
        stats.unit_hits += found is not None
    if found is not None:
        return found

    def build(root: Path) -> Path:
        obj = root / relative
        src = obj.with_suffix(".c")
        atomic_write(src, text)
        fd, tmp = tempfile.mkstemp(dir=obj.parent, prefix=obj.name + ".", suffix=".tmp.o")
        os.close(fd)
        try:
            _run(compile_command(src, Path(tmp), target, extra_flags), target, name, src, "compilation")
            os.replace(tmp, obj)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return obj

    obj = in_writable_cache(build, f"a translation unit of kernel {name!r}")
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
    extra_flags = tuple(extra_flags)
    version = require_compiler(target.cc)
    source = with_openmp_runtime(source, target, version)
    digest = source_digest(source, target, extra_flags)
    relative = Path("c") / digest[:2] / f"{_safe(name)}-{digest[:24]}.so"
    so_path = cached_file(relative)
    hit = so_path is not None
    _count(hit)
    if so_path is None:
        so_path = _build(source, relative, target, extra_flags, name)
    try:
        lib = _load(so_path, so_path.with_suffix(".c"), name)
    except CompileError:
        if not hit:
            raise
        # A cached file that does not load (foreign or damaged): build it again, once.
        _unlink_quietly(so_path)
        _count(False)
        so_path = _build(source, relative, target, extra_flags, name)
        lib, hit = _load(so_path, so_path.with_suffix(".c"), name), False
    return CompiledLibrary(lib=lib, path=so_path, source_path=so_path.with_suffix(".c"), digest=digest,
                           cache_hit=hit)


def with_openmp_runtime(source: str, target: Target, version: str) -> str:
    """``source`` with tensorforge's OpenMP runtime as one more translation unit, where the build
    uses OpenMP and the runtime fits it (``omp_runtime.wanted``); else ``source`` unchanged."""
    if ("-fopenmp" not in target.cflags or omp_runtime.MARK in source
            or not omp_runtime.wanted(source, target.arch, version)):
        return source
    return source + unit(omp_runtime.SOURCE)


def _count(hit: bool) -> None:
    with _lock:
        if hit:
            stats.hits += 1
        else:
            stats.misses += 1
            stats.compiler_runs += 1


def _build(source: str, relative: Path, target: Target, extra_flags: tuple[str, ...], name: str) -> Path:
    """Compiles ``source`` into the library at ``relative`` in the writable cache, the source beside it."""
    main, units = split_units(source)

    def build(root: Path) -> Path:
        so_path = root / relative
        c_path = so_path.with_suffix(".c")
        main_path = c_path.with_suffix(".main.c") if units else c_path
        atomic_write(c_path, source)
        if units:
            atomic_write(main_path, main)
        t0 = time.perf_counter()
        _run_compiler(main_path, so_path, target, extra_flags, name, units)
        atomic_write(so_path.with_suffix(".build_s"), f"{time.perf_counter() - t0:.3f}\n")
        return so_path

    return in_writable_cache(build, f"the library of kernel {name!r}")


def _safe(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    return cleaned[:48] or "kernel"
