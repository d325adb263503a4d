"""CUDA C to a cubin with NVRTC, cached on disk, and what ptxas says each kernel uses.

NVRTC compiles in-process and needs neither a GPU nor a driver, so a model's CUDA source is built
and checked on any machine with the ``tensorforge[cuda]`` wheels.  It is compiled to a **cubin**
for a real architecture (``sm_90``), not to PTX only: the PTX step accepts a kernel that declares
64 KiB of static shared memory, and only ptxas, building the cubin, refuses it (48 KiB is the
static limit).  ``-Xptxas=-v`` makes ptxas report every kernel's registers, spills, stack,
static shared memory and barriers; ``parse_ptxas_report`` reads that log and ``check_resources``
turns it into what would fail or run slowly on a ``GpuTarget``.

Compiling a model twice must not run NVRTC twice: the cubin and its log are stored under
``cache_dir()/"cuda"`` named by a hash of the source, the architecture, the options and the NVRTC
version, written the way the C toolchain writes (``codegen/c/toolchain.py``: a unique temporary
name, then a rename; an unwritable cache falls back to a temporary folder with a warning), and
the log is kept so a cache hit still knows the resources.  The source is kept beside them, for
people and for error messages.

A failed compile is a ``CompileError`` with the first lines of the log that say ``error``, the
kernel at fault when the log names one (ptxas does) or when the error's line lies in one (the
front end gives the line), and where the source was kept.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ...errors import CompileError, ResourceError, TensorforgeError
from ..c.toolchain import atomic_write, cached_file, in_writable_cache
from ..target import GpuTarget

INSTALL_HINT = "pip install 'tensorforge[cuda]'"
# Bumped whenever what goes into a cached cubin changes (options added here, the log format kept).
_RECIPE = "nvrtc-cubin-v1"
_PROGRAM_NAME = "model.cu"          # the name NVRTC's diagnostics give the source: "model.cu(12): error"
_ERROR_LINES = 40
_ELF_MAGIC = b"\x7fELF"
# Registers are given to a warp in blocks of 256 (every NVIDIA GPU from Kepler to Hopper), so a
# kernel's per-block need is rounded up per warp, as the occupancy calculator does.
_REGISTER_UNIT = 256


# ---- what ptxas reports ---------------------------------------------------------------------

@dataclass(frozen=True)
class KernelResources:
    """What one kernel needs per thread and per block, as ptxas reported it (bytes unless named)."""

    registers: int = 0          # 32-bit registers per thread
    spill_stores: int = 0       # bytes stored to local memory per thread because registers ran out
    spill_loads: int = 0
    stack_bytes: int = 0        # per-thread stack frame (local arrays, spills, calls)
    shared_bytes: int = 0       # static shared memory per block
    barriers: int = 0           # named barriers (1 when it calls __syncthreads)

    @property
    def spills(self) -> bool:
        return self.spill_stores > 0 or self.spill_loads > 0

    def as_dict(self) -> dict[str, int]:
        """The fields as a plain dict (``KernelInfo.resources``, JSON reports)."""
        return asdict(self)


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_REGISTERS = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SHARED = re.compile(r"(\d+) bytes smem")


def parse_ptxas_report(log: str) -> dict[str, KernelResources]:
    """Resources per entry function (kernel) of a ``ptxas -v`` log, in the log's order.

    ptxas reports an entry as ``Compiling entry function 'k'``, then ``Function properties for
    k`` with its stack and spills, then ``Used N registers, used B barriers, S bytes smem`` (older
    releases leave out the barriers).  Kernels are ``extern "C"``, so the names are the source's;
    a C++ kernel would appear mangled.  Non-entry functions (``__noinline__`` device functions)
    get properties of their own, which are not kernels and are left out.
    """
    found: dict[str, dict[str, int]] = {}
    entry = described = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = described = m.group(1)
            found[entry] = {}
        elif m := _PROPERTIES.search(line):
            described = m.group(1)
        elif (m := _FRAME.search(line)) and described == entry and entry is not None:
            found[entry].update(stack_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        elif (m := _REGISTERS.search(line)) and entry is not None:
            found[entry]["registers"] = int(m.group(1))
            for key, pattern in (("barriers", _BARRIERS), ("shared_bytes", _SHARED)):
                if sm := pattern.search(line):
                    found[entry][key] = int(sm.group(1))
    return {name: KernelResources(**fields) for name, fields in found.items()}


@dataclass(frozen=True)
class LimitBreak:
    """One limit a kernel breaks, said two ways from the same check: ``short`` for a log line (the
    fusion veto), ``long`` with the advice, for a report."""

    short: str
    long: str


def check_resources(resources: Mapping[str, KernelResources], target: GpuTarget,
                    threads_per_block: Mapping[str, int]) -> list[str]:
    """What in ``resources`` would fail to launch or run slowly on ``target``, one sentence per
    problem naming the kernel (empty when all is well).

    Spills are listed because each spilled value goes through local (global) memory; the
    register and shared-memory limits because a launch past them fails outright.  A kernel in
    ``threads_per_block`` that ptxas did not report is listed too: the runtime would not find it.
    """
    problems = [b.long for b in limit_breaks(resources, target, threads_per_block)]
    for name in threads_per_block:
        if name not in resources:
            problems.append(f"kernel '{name}': ptxas reported no such kernel (not an extern \"C\" __global__ "
                            f"function of the source?)")
    return problems


def limit_breaks(resources: Mapping[str, KernelResources], target: GpuTarget,
                 threads_per_block: Mapping[str, int]) -> list[LimitBreak]:
    """Every limit of ``target`` a kernel of ``resources`` breaks, in kernel order."""
    return [b for name, r in resources.items() for b in _kernel_breaks(name, r, target, threads_per_block.get(name))]


def _kernel_breaks(name: str, r: KernelResources, target: GpuTarget, threads: int | None) -> list[LimitBreak]:
    breaks = []
    if r.spills:
        breaks.append(LimitBreak(
            f"{name} spills {r.spill_stores} B stored, {r.spill_loads} B loaded per thread",
            f"kernel '{name}' spills registers to local memory ({r.spill_stores} bytes stored, "
            f"{r.spill_loads} bytes loaded per thread): keep fewer values live per thread "
            f"(smaller tiles, less unrolling)"))
    if r.registers > target.registers_per_thread:
        breaks.append(LimitBreak(
            f"{name} uses {r.registers} registers > {target.registers_per_thread} per thread",
            f"kernel '{name}' uses {r.registers} registers per thread, more than the "
            f"{target.registers_per_thread} of {target.name}"))
    if threads is not None:
        if threads > target.max_threads_per_block:
            breaks.append(LimitBreak(
                f"{name} takes {threads} threads > {target.max_threads_per_block} per block",
                f"kernel '{name}' is launched with {threads} threads per block, more than the "
                f"{target.max_threads_per_block} of {target.name}"))
        need = block_registers(r.registers, threads, target.warp_size)
        if need > target.registers_per_sm:
            breaks.append(LimitBreak(
                f"{name} uses {r.registers} registers x {threads} threads > {target.registers_per_sm} per SM",
                f"kernel '{name}' needs {need} registers per block ({r.registers} per thread x "
                f"{threads} threads, given per warp in units of {_REGISTER_UNIT}), more than the "
                f"{target.registers_per_sm} of one SM of {target.name}: its launch fails (too many "
                f"resources requested); use fewer threads per block or fewer registers"))
    if r.shared_bytes > target.shared_per_block:
        breaks.append(LimitBreak(
            f"{name} declares {r.shared_bytes} B shared > {target.shared_per_block} per block",
            f"kernel '{name}' declares {r.shared_bytes} bytes of static shared memory, more than the "
            f"{target.shared_per_block} a block may declare on {target.name}"))
    return breaks


def block_registers(registers: int, threads: int, warp_size: int = 32) -> int:
    """Registers a block of ``threads`` takes from its SM: per warp, ``registers x warp_size``
    rounded up to the allocation unit (256)."""
    warps = -(-threads // warp_size)
    per_warp = -(-registers * warp_size // _REGISTER_UNIT) * _REGISTER_UNIT
    return warps * per_warp


# ---- NVRTC ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CudaBinary:
    """A compiled CUDA source: the cubin a driver loads, the NVRTC/ptxas log and what it says."""

    cubin: bytes
    log: str
    resources: dict[str, KernelResources]    # per extern "C" kernel
    digest: str                              # the cache key (sha256 hex)
    cache_hit: bool                          # True when NVRTC did not run for this call
    arch: str = "sm_90"


def import_binding(module: str, purpose: str):
    """``cuda.bindings.<module>``, or the ``ResourceError`` saying that ``purpose`` needs it and
    which wheels to install."""
    try:
        return importlib.import_module(f"cuda.bindings.{module}")
    except ImportError as exc:
        raise ResourceError(f"{purpose}, which is not installed ({exc}): {INSTALL_HINT}") from exc


def _nvrtc():
    """The NVRTC bindings, or the ``ResourceError`` saying which wheels to install."""
    return import_binding("nvrtc", "compiling CUDA needs NVRTC")


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """``13.0`` and the wheel's release when known (``13.0 (13.0.88)``): part of every cache key,
    so a new NVRTC (and the ptxas inside it) compiles again."""
    nvrtc = _nvrtc()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except (RuntimeError, OSError) as exc:     # the bindings are there, libnvrtc.so is not
        raise ResourceError(f"the NVRTC library cannot be loaded ({exc}): {INSTALL_HINT}") from exc
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise ResourceError(f"NVRTC does not answer nvrtcVersion ({result.name}): {INSTALL_HINT}")
    try:
        from importlib.metadata import PackageNotFoundError, version
        return f"{major}.{minor} ({version('nvidia-cuda-nvrtc')})"
    except (ImportError, PackageNotFoundError):
        return f"{major}.{minor}"


def nvrtc_available() -> bool:
    """Whether CUDA sources can be compiled here (the bindings import and libnvrtc loads)."""
    try:
        nvrtc_version()
    except TensorforgeError:
        return False
    return True


@functools.lru_cache(maxsize=1)
def _include_options() -> tuple[str, ...]:
    """``-I`` for the CUDA headers of the wheels (``cuda_fp16.h``, ``cuda_bf16.h``): NVRTC has no
    search path of its own.  Empty when they cannot be found (sources then include nothing)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory
        folder = find_nvidia_header_directory("cudart")
    except Exception:      # noqa: BLE001 - an optional helper; any failure means "not found"
        return ()
    return (f"-I{folder}",) if folder else ()


def compile_options(arch: str, options: Sequence[str] = ()) -> list[str]:
    """Every option NVRTC gets: the real architecture, ptxas's report, the header folder, then
    the caller's."""
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise TensorforgeError(f"CUDA architecture {arch!r} is not a real one such as 'sm_90': a virtual one "
                               f"(compute_XX) gives PTX only, and the cubin is what checks a kernel's resources")
    return [f"--gpu-architecture={arch}", "-Xptxas=-v", *_include_options(), *options]


def cuda_digest(source: str, arch: str, options: Sequence[str], version: str) -> str:
    """Hash of everything that decides the cubin's bytes (and the log's)."""
    h = hashlib.sha256()
    for part in (source, arch, "\0".join(options), version, _RECIPE):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def compile_cuda(source: str, arch: str = "sm_90", options: Sequence[str] = ()) -> CudaBinary:
    """Compiles ``source`` (``extern "C"`` kernels) to a cubin for ``arch``, or takes it from the cache.

    Raises ``CompileError`` with NVRTC's error lines and the kernel at fault; ``ResourceError``
    when NVRTC is not installed.
    """
    version = nvrtc_version()
    opts = compile_options(arch, options)
    digest = cuda_digest(source, arch, opts, version)
    relative = Path("cuda") / digest[:2] / f"{digest[:24]}.cubin"
    cached = _read_cached(relative)
    if cached is not None:
        cubin, log = cached
        return CudaBinary(cubin, log, parse_ptxas_report(log), digest, True, arch)
    cubin, log = _run_nvrtc(source, opts, arch, relative)
    in_writable_cache(lambda root: _write_entry(root / relative, source, cubin, log), "a CUDA cubin")
    return CudaBinary(cubin, log, parse_ptxas_report(log), digest, False, arch)


def _read_cached(relative: Path) -> tuple[bytes, str] | None:
    """(cubin, log) from the cache, or None when absent or not a whole entry (a foreign or damaged
    file is compiled again and overwritten)."""
    path = cached_file(relative)
    if path is None:
        return None
    try:
        cubin = path.read_bytes()
        log = path.with_suffix(".log").read_text()
    except OSError:
        return None
    return (cubin, log) if cubin.startswith(_ELF_MAGIC) else None


def _write_entry(cubin_path: Path, source: str, cubin: bytes, log: str) -> Path:
    """The source and the log first, the cubin last: a reader that finds the cubin finds the log."""
    atomic_write(cubin_path.with_suffix(".cu"), source)
    atomic_write(cubin_path.with_suffix(".log"), log)
    atomic_write(cubin_path, cubin)
    return cubin_path


def _run_nvrtc(source: str, opts: list[str], arch: str, relative: Path) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    prog = _checked(nvrtc, nvrtc.nvrtcCreateProgram(source.encode(), _PROGRAM_NAME.encode(), 0, [], []),
                    "nvrtcCreateProgram")
    try:
        encoded = [o.encode() for o in opts]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(encoded), encoded)
        log = _program_log(nvrtc, prog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(_failure(source, log, arch, result.name, relative))
        size = _checked(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        if not size:
            raise CompileError(f"NVRTC made no cubin for {arch} (options {' '.join(opts)})")
        cubin = bytearray(size)
        _checked(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _checked(nvrtc, result: tuple, call: str):
    """The value of an NVRTC call that returned ``(status, value)`` or ``(status,)``; a
    ``CompileError`` naming the call when the status is not success."""
    if result[0] != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {call} failed: {result[0].name}")
    return result[1] if len(result) > 1 else None


def _program_log(nvrtc, prog) -> str:
    """The compile log as text (NVRTC separates ptxas's part with NUL bytes)."""
    size = _checked(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
    buf = bytearray(size)
    if size:
        _checked(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
    return bytes(buf).decode(errors="replace").replace("\0", "").strip()


def _failure(source: str, log: str, arch: str, status: str, relative: Path) -> str:
    """The message of a failed compile: the kernel at fault, where the source is kept, the errors."""
    kernel = failing_kernel(log, source)
    what = f"CUDA kernel '{kernel}'" if kernel else "the CUDA source"
    kept = _keep_source(relative.with_suffix(".cu"), source)
    where = f"; source kept at {kept}" if kept else ""
    return f"NVRTC could not compile {what} for {arch} ({status}){where}\n{error_excerpt(log)}"


def _keep_source(relative: Path, source: str) -> Path | None:
    """Writes the failed source into the cache for people to read; None when that fails too (the
    compile error matters more than a cache that cannot be written)."""
    try:
        return in_writable_cache(lambda root: _write_source(root / relative, source), "a failed CUDA source")
    except TensorforgeError:
        return None


def _write_source(path: Path, source: str) -> Path:
    atomic_write(path, source)
    return path


def error_excerpt(log: str, limit: int = _ERROR_LINES) -> str:
    """The lines of ``log`` that say ``error`` with the two after each (the front end prints the
    source line and a caret there), at most ``limit`` lines; the head of the log when none does.
    ptxas's info lines come first in a log and would otherwise crowd out the error."""
    lines = log.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if "error" in line.lower():
            picked.extend(lines[i:i + 3])
        if len(picked) >= limit:
            break
    return "\n".join((picked or lines)[:limit])


_NAMED_FUNCTION = re.compile(r"function '([^']+)'", re.IGNORECASE)      # ptxas: "Entry function 'k' uses too much"
_ERROR_LINE = re.compile(re.escape(_PROGRAM_NAME) + r"\((\d+)\): (?:catastrophic )?error")
_KERNEL_DEF = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+"
                         r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")


def failing_kernel(log: str, source: str) -> str | None:
    """The kernel a failed compile's log blames: named by ptxas on its error line, or the last
    ``__global__`` function defined at or before the first front-end error's line."""
    for line in log.splitlines():
        if "error" in line.lower() and (m := _NAMED_FUNCTION.search(line)):
            return m.group(1)
    m = _ERROR_LINE.search(log)
    if m is None:
        return None
    head = "\n".join(source.splitlines()[:int(m.group(1))])
    names = _KERNEL_DEF.findall(head)
    return names[-1] if names else None
