"""Fusion on a GPU target: what ptxas says a candidate kernel would use.

The cost model counts CPU vector registers; on a GPU a fused kernel's registers, spills and
shared memory are known only once ptxas has built it, and a kernel that needs more registers
per block than an SM holds does not launch at all.  So, on a GPU target, a candidate merge that
passed every other check is printed as CUDA the way the backend prints it
(``codegen/gpu/backend.py:compile_kernel``), compiled by NVRTC for the target's architecture,
and vetoed with ptxas's numbers when it does not fit: more registers per thread than the target
allows, more per block than an SM holds, more static shared memory than a block may declare, or
any spill.  Only CUDA targets are judged: ptxas's numbers describe NVIDIA hardware.

Verdicts are cached per target and structure of the candidate (``kernel_key``: the same merge in
every layer of a model, or in the next compile of the model, is generated once); ptxas's reports
per source hash, in this process and on disk (``compile_cuda``'s cache, for the next process).
Candidates that cannot press registers skip the compile: no reduction (so no GEMM micro-tile,
no block reduction) and fewer than ``SKIP_BELOW_OPS`` scalar ops.
"""
from __future__ import annotations

import hashlib
from typing import Any, Callable, Mapping

from ...codegen.cuda.language import COMPILE_OPTIONS
from ...codegen.cuda.nvrtc import KernelResources, compile_cuda, limit_breaks, nvrtc_available
from ...codegen.driver import kernel_key
from ...codegen.gpu.backend import compile_kernel, program_source
from ...codegen.target import GpuTarget
from ...dialects.structured.ops import KernelView
from ...errors import CompileError
from ...ir.core import Operation
from ..lower.graph_to_kernels import is_library_kernel
from .cost import kernel_ops

Oracle = Callable[[Operation], str | None]

# Elementwise kernels (no reduction) below this many scalar ops are not compiled.  Measured for sm_90
# (one thread per point, 256 per block): elementwise candidates of 5 to 1500 scalar ops used 14 to 40
# registers, set by the values live at once (which the cost model's register veto bounds), not by
# their size, far from 255 per thread; their compile time grows with size instead (a 1500-op chain
# of sin: 11 s).  Every reduction is compiled: a tiled GEMM alone takes 60 to 190 registers.
SKIP_BELOW_OPS = 2000
KERNEL_NAME = "k"                    # launches print as k_0, k_1, ...: one name, so sources dedupe

# Generating a candidate's code costs more than reading its cubin from the disk cache, so verdicts
# are kept per (target, kernel structure): the backend dedupes kernels by the same key.
_VERDICTS: dict[tuple[str, str], str | None] = {}
_RESOURCES: dict[str, Mapping[str, KernelResources]] = {}      # sha256(arch, source) -> ptxas report


def gpu_resource_oracle(target: Any) -> Oracle | None:
    """``kernel -> reason | None``: why ptxas says a candidate kernel would not fit ``target``
    (None: it fits, or it cannot be judged).  None when ``target`` is not a CUDA target or NVRTC
    is not installed: ptxas's numbers describe NVIDIA hardware, and an OpenCL build (often on
    another vendor's device) should not pay a CUDA compile per fusion candidate."""
    if not isinstance(target, GpuTarget) or target.language != "cuda" or not nvrtc_available():
        return None
    arch = target.arch or "sm_90"
    where = f"{target.key()}:{arch}"

    def check(kernel: Operation) -> str | None:
        if not may_press_registers(kernel):
            return None
        key = (where, kernel_key(kernel))
        if key not in _VERDICTS:
            _VERDICTS[key] = _judge(kernel, target, arch)
        return _VERDICTS[key]

    return check


def may_press_registers(kernel: Operation) -> bool:
    """Whether ``kernel`` could need more registers than a GPU gives it: a reduction (the GEMM
    micro-tile or a block reduction with its epilogue) or a large elementwise body.  Library
    kernels are not generated code and never count."""
    if is_library_kernel(kernel):
        return False
    if any(cv.combiner != "none" for cv in KernelView(kernel).computes):
        return True
    return kernel_ops(kernel) >= SKIP_BELOW_OPS


def _judge(kernel: Operation, target: GpuTarget, arch: str) -> str | None:
    """The veto for one kernel, or None.  A kernel the backend cannot generate is not judged here
    (the backend reports it if it is chosen).  One that ptxas refuses (too much shared memory, too
    many resources) is vetoed: the CUDA build could not use it either."""
    built = cuda_source(kernel, target)
    if built is None:
        return None
    source, threads = built
    try:
        problems = resource_problems(ptxas_report(source, arch), target, threads)
    except CompileError as exc:
        problems = [str(exc).splitlines()[0]]
    return f"GPU resources (ptxas {arch}): {'; '.join(problems)}" if problems else None


def cuda_source(kernel: Operation, target: GpuTarget) -> tuple[str, dict[str, int]] | None:
    """The CUDA program the backend would build for ``kernel`` alone on ``target`` (prelude and its
    launches), and each launch's threads per block;
    None when the backend cannot generate it (lowering, scheduling, its verifier or the printer
    raises)."""
    try:
        _, infos = compile_kernel(kernel, KERNEL_NAME, target)
    except Exception:      # noqa: BLE001 - any failure means "not judged"; the backend reports it later
        return None
    return program_source("cuda", infos), {name: i.threads for name, i in infos.items()}


def ptxas_report(source: str, arch: str) -> Mapping[str, KernelResources]:
    """ptxas's resources per kernel of ``source``, compiled once per process (and once per
    machine through ``compile_cuda``'s disk cache)."""
    digest = hashlib.sha256(f"{arch}\0{source}".encode()).hexdigest()
    if digest not in _RESOURCES:
        _RESOURCES[digest] = compile_cuda(source, arch, COMPILE_OPTIONS).resources
    return _RESOURCES[digest]


def resource_problems(resources: Mapping[str, KernelResources], target: GpuTarget,
                      threads: Mapping[str, int]) -> list[str]:
    """One short clause per limit a kernel of ``resources`` breaks on ``target``, with the numbers
    (the checks of ``nvrtc.check_resources``, worded for a log line)."""
    return [b.short for b in limit_breaks(resources, target, threads)]


__all__ = ["SKIP_BELOW_OPS", "cuda_source", "gpu_resource_oracle", "may_press_registers", "ptxas_report",
           "resource_problems"]
