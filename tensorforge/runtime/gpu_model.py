"""A compiled GPU model as ``tensorforge.compile`` returns it: the ``GpuProgram`` plus the runtime of
its language, behind the same call interface as the CPU's ``NativeModel``.

The device code is built when the model is made, so a kernel the device compiler rejects fails
``compile``, not the first call: OpenCL programs are built for the chosen device, CUDA sources are
compiled to sm_90 cubins by NVRTC (which needs no GPU).  Running CUDA needs an NVIDIA driver and
device; without one the model still carries its source, cubin and per-kernel resource report, and
a call says what is missing.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import TensorforgeError
from ..ir.symbolic import SymbolTable
from .signature import TensorSpec


class GpuModel:
    def __init__(self, program, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], target):
        self.program = program
        self.target = target
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.symbols = SymbolTable()
        self.source = program.source
        self.binary = None
        self.build = {"target": {"key": target.key(), "name": target.name, "language": target.language},
                      "kernels": len(program.launches), "unique_kernels": len(program.kernels)}
        self._runtime = self._make_runtime()

    @property
    def language(self) -> str:
        return self.program.language

    def _make_runtime(self):
        if self.language == "opencl":
            from .opencl import OpenCLModel
            return OpenCLModel(self.program, input_names=[s.name for s in self.inputs],
                               output_names=[s.name for s in self.outputs])
        from ..codegen.cuda.language import COMPILE_OPTIONS
        from ..codegen.cuda.nvrtc import compile_cuda
        self.binary = compile_cuda(self.source, self.target.arch or "sm_90", COMPILE_OPTIONS)
        for name, info in self.program.kernels.items():
            res = self.binary.resources.get(name)
            if res is not None:
                info.resources = res.as_dict()
        from .cuda import CudaModel, cuda_device_available
        if not cuda_device_available():
            return None
        return CudaModel(self.program, self.binary, inputs=self.inputs, outputs=self.outputs)

    def run(self, inputs: Sequence[Any], out: Sequence[Any] | None = None) -> list:
        """The outputs for ``inputs`` (NumPy arrays or torch tensors); torch in, torch out."""
        if out is not None:
            raise TensorforgeError("out= is supported on target='cpu' only; GPU models return new arrays")
        if len(inputs) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise TensorforgeError(f"the model takes {len(self.inputs)} input(s) ({names}), got {len(inputs)}")
        if self._runtime is None:
            raise TensorforgeError("this CUDA model was compiled (NVRTC, sm_90) but this machine has no NVIDIA driver "
                                   "or GPU to run it; its source is model.source and the per-kernel resources are "
                                   "in model.program.kernels")
        return list(self._runtime(*inputs))      # each runtime checks the inputs and maps torch in to torch out

    def __call__(self, *inputs):
        outs = self.run(inputs)
        return outs[0] if len(outs) == 1 else tuple(outs)
