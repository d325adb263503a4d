"""Turn upstream MLIR text into a shared library with upstream tools only, cached on disk.

The MLIR backend exists to cross-check the C backend through a code path that shares none of its
code generation, so nothing here rewrites the text: ``mlir-opt-19`` lowers it to the LLVM dialect,
``mlir-translate-19`` prints LLVM IR, ``llc-19`` makes an object file and the C compiler links it
(with ``-lm``: ``--convert-math-to-libm`` turns ``math.tanh`` and friends into libm calls).

Compiling a model twice must not run the tools twice: the library is stored in the C backend's
cache (``codegen/c/toolchain.py``: same root, same atomic writes, same read-only fallback) under
``mlir/``, named by the SHA-256 of the text, the pipeline and every tool's version line. Each stage
runs with a timeout in a temporary folder that is removed afterwards; a failing stage is a
``CompileError`` naming the tool, with the first lines it printed. ``compile_mlir`` can also fill a
dict with the seconds each stage took, which the cross-check benchmark reports.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from ...errors import CompileError, CompilerNotFoundError
from ..c.toolchain import atomic_write, cached_file, in_writable_cache
from ..target import default_compiler

MLIR_OPT = "mlir-opt-19"
MLIR_TRANSLATE = "mlir-translate-19"
LLC = "llc-19"
TOOLS = (MLIR_OPT, MLIR_TRANSLATE, LLC)
INSTALL_HINT = "install them (Debian/Ubuntu: `apt-get install mlir-19-tools llvm-19`) or compile with target='cpu'"

TIMEOUT_S = float(os.environ.get("TENSORFORGE_MLIR_TIMEOUT", "1800"))
"""Seconds one tool may run before the compile fails (``$TENSORFORGE_MLIR_TIMEOUT``); unscheduled
loop nests of a large model make big inputs, so the default is generous."""

_ERROR_LINES = 12
# Bumped whenever the recipe below changes, so libraries built the old way are not reused.
_RECIPE = "mlir-opt|translate|llc-O2-pic|cc-shared-lm-v1"

BUFFERIZE = ("--one-shot-bufferize=bufferize-function-boundaries",)
DEALLOCATE = ("--buffer-deallocation-pipeline",)
# The checked pipeline, plus --lower-affine in front (a no-op unless an exporter uses affine.apply).
TO_LLVM = ("--lower-affine", "--convert-linalg-to-loops", "--convert-scf-to-cf", "--convert-math-to-libm",
           "--convert-math-to-llvm", "--convert-arith-to-llvm", "--expand-strided-metadata",
           "--finalize-memref-to-llvm", "--convert-func-to-llvm", "--convert-cf-to-llvm",
           "--reconcile-unrealized-casts")


def mlir_tools_available() -> bool:
    """Whether ``mlir-opt-19``, ``mlir-translate-19``, ``llc-19`` and a C compiler are on $PATH."""
    return not missing_tools()


def missing_tools() -> list[str]:
    """The tools ``compile_mlir`` needs that cannot be found, by the name looked for."""
    cc = shlex.split(default_compiler())[0]
    return [tool for tool in (*TOOLS, cc) if shutil.which(tool) is None]


def require_tools() -> None:
    """A ``CompilerNotFoundError`` naming what to install when a tool is missing (checked before a
    model is exported, so a long export does not end in it)."""
    missing = missing_tools()
    if missing:
        raise CompilerNotFoundError(f"target='mlir' needs {', '.join(missing)} on $PATH; {INSTALL_HINT}")


def mlir_pipeline(text: str) -> tuple[str, ...]:
    """The ``mlir-opt`` passes for ``text``: bufferization only for tensor-level input, the
    deallocation pipeline only where buffers are allocated and nothing frees them yet (the
    ownership-based deallocation expects input without ``memref.dealloc``), then the lowering to
    the LLVM dialect."""
    passes: list[str] = []
    if "tensor<" in text:
        passes += BUFFERIZE
    if "tensor<" in text or ("memref.alloc(" in text and "memref.dealloc" not in text):
        passes += DEALLOCATE
    return (*passes, *TO_LLVM)


@functools.lru_cache(maxsize=None)
def tool_version(tool: str) -> str:
    """The line of ``tool --version`` that says the version, else its first line (``gcc`` prints no
    "version" word): part of every cache key, so an upgraded tool rebuilds."""
    try:
        out = subprocess.run([*shlex.split(tool), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompilerNotFoundError(f"{tool} cannot run ({exc}); {INSTALL_HINT}") from exc
    lines = [line.strip() for line in (out.stdout or out.stderr).splitlines() if line.strip()]
    versioned = [line for line in lines if "version" in line.lower()]
    return (versioned or lines or [tool])[0]


def library_digest(text: str, cc: str) -> str:
    """SHA-256 of everything that decides the library's bytes: the text, the pipeline, the tools."""
    h = hashlib.sha256()
    for part in (text, " ".join(mlir_pipeline(text)), *map(tool_version, (*TOOLS, cc)), _RECIPE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_mlir(text: str, name: str = "model", times: dict[str, float] | None = None) -> Path:
    """The shared library built from the MLIR module ``text`` (its path in the cache).

    ``name`` labels the files and error messages. ``times``, when given, receives the seconds of
    each stage (``mlir-opt``, ``mlir-translate``, ``llc``, ``link``; ``cache`` alone on a hit) and
    ``total``. Raises ``CompilerNotFoundError`` when a tool is missing and ``CompileError`` naming
    the tool (with its first error lines) when one fails or runs past ``TIMEOUT_S``.
    """
    start = time.perf_counter()
    stages = times if times is not None else {}
    require_tools()
    cc = default_compiler()
    digest = library_digest(text, cc)
    relative = Path("mlir") / digest[:2] / f"{_safe(name)}-{digest[:24]}.so"
    found = cached_file(relative)
    if found is not None:
        stages["cache"] = time.perf_counter() - start
    else:
        found = in_writable_cache(lambda root: _build(text, root / relative, cc, name, stages),
                                  f"the MLIR library of {name!r}")
    stages["total"] = time.perf_counter() - start
    return found


def _build(text: str, so_path: Path, cc: str, name: str, stages: dict[str, float]) -> Path:
    """Writes the text into the cache (kept beside the library, and named by errors), runs the four
    stages in a temporary folder, then moves the library into the cache atomically."""
    src = so_path.with_suffix(".mlir")
    atomic_write(src, text)
    with tempfile.TemporaryDirectory(prefix="tensorforge-mlir-") as tmp:
        lowered, ll, obj, lib = (Path(tmp) / f for f in ("llvm.mlir", "out.ll", "out.o", "out.so"))
        _stage(stages, "mlir-opt", name, src, [MLIR_OPT, *mlir_pipeline(text), str(src), "-o", str(lowered)])
        _stage(stages, "mlir-translate", name, src, [MLIR_TRANSLATE, "--mlir-to-llvmir", str(lowered), "-o", str(ll)])
        _stage(stages, "llc", name, src, [LLC, "-O2", "-filetype=obj", "-relocation-model=pic", str(ll), "-o", str(obj)])
        _stage(stages, "link", name, src, [*shlex.split(cc), "-shared", str(obj), "-o", str(lib), "-lm"])
        fd, part = tempfile.mkstemp(dir=so_path.parent, prefix=so_path.name + ".", suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(lib, part)
            os.replace(part, so_path)
        except BaseException:
            Path(part).unlink(missing_ok=True)
            raise
    return so_path


def _stage(stages: dict[str, float], stage: str, name: str, src: Path, cmd: list[str]) -> None:
    """Runs one tool; its time goes into ``stages[stage]``; a failure is a ``CompileError``."""
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except FileNotFoundError as exc:
        raise CompilerNotFoundError(f"{cmd[0]} not found while building {name!r} for target='mlir'; "
                                    f"{INSTALL_HINT}") from exc
    except subprocess.TimeoutExpired as exc:
        raise CompileError(f"{cmd[0]} ran past {TIMEOUT_S:.0f} s building {name!r} for target='mlir'; raise "
                           f"$TENSORFORGE_MLIR_TIMEOUT or compile with target='cpu'") from exc
    finally:
        stages[stage] = time.perf_counter() - start
    if proc.returncode != 0:
        raise CompileError(f"{cmd[0]} failed building {name!r} for target='mlir' (exit {proc.returncode}); "
                           f"input kept at {src}\ncommand: {shlex.join(cmd)}\n"
                           f"{_first_lines(proc.stderr)}")


def _first_lines(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return "\n".join(lines[:_ERROR_LINES]) or "(no output)"


def _safe(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    return cleaned[:48] or "model"
