"""The target the upstream-MLIR export lowers for.

Lowering and fusion ask a target what it can map (``Target.tensorizes``: GEMM micro-kernels,
``Target.hand_written_kernels``: ops with a hand-written C form).  Upstream MLIR has neither, so
every op with a tensor-expression form must reach the exporter as ``structured.compute`` ops:
``MlirTarget`` is the host CPU with both switched off, as ``GpuTarget`` has them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..target import Target


@dataclass(frozen=True)
class MlirTarget(Target):
    """The host CPU, with every kernel a tensor expression (no micro-kernels, no hand-written C)."""

    tensorizes = False
    hand_written_kernels = False

    @classmethod
    def host(cls) -> "MlirTarget":
        """The machine this process runs on (cached: detecting it asks the C compiler)."""
        return _host()


@functools.lru_cache(maxsize=1)
def _host() -> MlirTarget:
    return MlirTarget()
