"""What a GPU backend hands to its runtime: the kernels' source, the launches in program order,
and one device-memory plan.

Every buffer a launch touches lives in one of five regions: the model's inputs and outputs (host
arrays copied in and out, or on CUDA the caller's device tensors), the weights (uploaded once),
the arena (intermediates between kernels, placed by the memory plan) and the scratch (each
kernel's own temporaries that outlive one launch, reused by every kernel).  The runtime makes one
device allocation for weights + arena + scratch and turns every ``BufferRef`` into a pointer
(CUDA) or a base-and-offset pair (OpenCL).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...runtime.arena_plan import aligned

REGIONS = ("input", "output", "weights", "arena", "scratch")


def pack_regions(sizes: Sequence[int], align: int) -> tuple[list[int], int]:
    """Offsets of consecutive regions of ``sizes`` bytes, each starting on a multiple of ``align``,
    and where the last one ends: the layout of one device allocation (or of a kernel's scratch)."""
    offsets, end = [], 0
    for size in sizes:
        offsets.append(aligned(end, align))
        end = offsets[-1] + int(size)
    return offsets, end


@dataclass(frozen=True)
class BufferRef:
    """One kernel argument: ``offset`` bytes into a region (``index`` picks the input or output)."""

    region: str
    offset: int = 0
    index: int = 0

    def __post_init__(self) -> None:
        if self.region not in REGIONS:
            raise ValueError(f"unknown region '{self.region}' (one of {REGIONS})")


@dataclass(frozen=True)
class Launch:
    """One kernel launch: ``grid`` work-groups (blocks) of ``block`` work-items (threads), x-y-z."""

    kernel: str                              # the function's name in the program's source
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[BufferRef, ...]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass
class KernelInfo:
    """One distinct kernel function: what it needs from the device (for the verifier, the resource
    report and ``explain``)."""

    name: str
    source: str                   # its text alone (the program's source holds all of them)
    threads: int                  # threads per block
    shared_bytes: int             # static shared memory per block
    schedule: str = ""            # how it was scheduled, for people
    origin: str = ""              # the structured.kernel it came from (its sym_name)
    resources: dict = field(default_factory=dict)   # registers, spills, ... from the device compiler


@dataclass
class GpuProgram:
    """A whole model for one GPU language: print, verify, compile, run."""

    language: str                            # "opencl" | "cuda"
    source: str
    launches: list[Launch]
    kernels: dict[str, KernelInfo]
    weights: np.ndarray                      # uint8 blob, uploaded once
    arena_bytes: int
    scratch_bytes: int
    input_types: list = field(default_factory=list)     # TensorType per model input
    output_types: list = field(default_factory=list)    # TensorType per model output
