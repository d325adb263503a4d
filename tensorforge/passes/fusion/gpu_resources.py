"""Fusion on a GPU target: what ptxas says a candidate kernel would use.

The cost model counts CPU vector registers; on a GPU a fused kernel's registers, spills and
shared memory are known only once ptxas has built it, and a kernel that needs more registers
per block than an SM holds does not launch at all.  So, on a GPU target, a candidate merge that
passed every other check is printed as CUDA the way the backend prints it
(``codegen/gpu/backend.py:compile_kernel``), compiled by NVRTC for the target's architecture,
and vetoed with ptxas's numbers when it does not fit: more registers per thread than the target
allows, more per block than an SM holds, more static shared memory than a block may declare, or
any spill.  An OpenCL target is judged the same way, the CUDA build standing in for it.

Verdicts are cached per target and structure of the candidate (``kernel_key``: the same merge in
every layer of a model, or in the next compile of the model, is generated once); ptxas's reports
per source hash, in this process and on disk (``compile_cuda``'s cache, for the next process).
Candidates that cannot press registers skip the compile: no reduction (so no GEMM micro-tile,
no block reduction) and fewer than ``SKIP_BELOW_OPS`` scalar ops.
"""
from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Callable, Mapping

from ...dialects.structured.ops import KernelView
from ...ir.core import Operation
from ..lower.graph_to_kernels import is_library_kernel
from .cost import kernel_ops

Oracle = Callable[[Operation], "str | None"]

# Elementwise kernels (no reduction) below this many scalar ops are not compiled.  Measured on the
# candidates of the zoo models for sm_90: elementwise kernels of up to 1000+ ops, one thread per
# point, used at most 32 registers (the inputs' pointers and the index arithmetic dominate), far
# from 255 per thread or 65536 / 256 threads per SM.
SKIP_BELOW_OPS = 1024
KERNEL_NAME = "k"                    # launches print as k_0, k_1, ...: one name, so sources dedupe
OPTIONS = ("--fmad=false",)          # what the CUDA runtime compiles with (runtime/gpu_model.py)

# Generating a candidate's code costs more than reading its cubin from the disk cache, so verdicts
# are kept per (target, kernel structure): the backend dedupes kernels by the same key.
_VERDICTS: dict[tuple[str, str], str | None] = {}
_RESOURCES: dict[str, Mapping[str, Any]] = {}     # sha256(arch, source) -> ptxas's report per kernel


def gpu_resource_oracle(target: Any) -> Oracle | None:
    """``kernel -> reason | None``: why ptxas says a candidate kernel would not fit ``target``
    (None: it fits, or it cannot be judged).  None when ``target`` is not a GPU target or NVRTC
    is not installed."""
    from ...codegen.cuda.nvrtc import nvrtc_available
    from ...codegen.target import GpuTarget
    if not isinstance(target, GpuTarget) or not nvrtc_available():
        return None
    cuda = dataclasses.replace(target, language="cuda")
    arch = target.arch or "sm_90"
    where = f"{cuda.key()}:{arch}"

    def check(kernel: Operation) -> str | None:
        if not may_press_registers(kernel):
            return None
        from ...codegen.driver import kernel_key
        key = (where, kernel_key(kernel))
        if key not in _VERDICTS:
            _VERDICTS[key] = _judge(kernel, cuda, arch)
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


def _judge(kernel: Operation, target: Any, arch: str) -> str | None:
    """The veto for one kernel, or None; a kernel the backend cannot generate is not judged here
    (the backend reports it when it compiles the chosen kernels)."""
    built = cuda_source(kernel, target)
    if built is None:
        return None
    source, threads = built
    problems = resource_problems(ptxas_report(source, arch), target, threads)
    return f"GPU resources (ptxas {arch}): {'; '.join(problems)}" if problems else None


def cuda_source(kernel: Operation, target: Any) -> tuple[str, dict[str, int]] | None:
    """The CUDA program the backend would build for ``kernel`` alone (prelude and its launches),
    and each launch's threads per block; None when lowering or scheduling fails."""
    from ...codegen.gpu.backend import compile_kernel
    from ...codegen.gpu.printer import LANGUAGES
    try:
        _, infos = compile_kernel(kernel, KERNEL_NAME, target)
    except Exception:      # noqa: BLE001 - any failure means "not judged"; the backend reports it later
        return None
    source = LANGUAGES["cuda"].prelude + "\n" + "\n".join(i.source for i in infos.values())
    return source, {name: i.threads for name, i in infos.items()}


def ptxas_report(source: str, arch: str) -> Mapping[str, Any]:
    """ptxas's resources per kernel of ``source``, compiled once per process (and once per
    machine through ``compile_cuda``'s disk cache)."""
    from ...codegen.cuda.nvrtc import compile_cuda
    digest = hashlib.sha256(f"{arch}\0{source}".encode()).hexdigest()
    if digest not in _RESOURCES:
        _RESOURCES[digest] = compile_cuda(source, arch, OPTIONS).resources
    return _RESOURCES[digest]


def resource_problems(resources: Mapping[str, Any], target: Any, threads: Mapping[str, int]) -> list[str]:
    """One short clause per limit a kernel of ``resources`` breaks on ``target``, with the numbers."""
    from ...codegen.cuda.nvrtc import block_registers
    out = []
    for name, r in resources.items():
        n = threads.get(name, 0)
        if r.registers > target.registers_per_thread:
            out.append(f"{name} uses {r.registers} registers > {target.registers_per_thread} per thread")
        if n and block_registers(r.registers, n, target.warp_size) > target.registers_per_sm:
            out.append(f"{name} uses {r.registers} registers x {n} threads > {target.registers_per_sm} per SM")
        if r.shared_bytes > target.shared_per_block:
            out.append(f"{name} declares {r.shared_bytes} B shared > {target.shared_per_block} per block")
        if r.spills:
            out.append(f"{name} spills {r.spill_stores} B stored, {r.spill_loads} B loaded per thread")
    return out


__all__ = ["SKIP_BELOW_OPS", "cuda_source", "gpu_resource_oracle", "may_press_registers", "ptxas_report",
           "resource_problems"]
