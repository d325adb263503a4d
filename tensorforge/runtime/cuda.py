"""Runs a CUDA ``GpuProgram`` through the CUDA driver API (``cuda.bindings.driver``).

The runtime presents a compiled model the way ``OpenCLModel`` does (``inputs``/``outputs`` specs,
``model(*inputs)`` and ``run(inputs, out=None)`` giving a list of outputs), and ``GpuModel``
(``gpu_model.py``) puts it behind ``tensorforge.compile(..., target="cuda")``.

Everything that does not change between calls is set up once, at construction: the primary
context of the device, the module loaded from the cubin and one ``CUfunction`` per kernel, one
stream, and **one** device allocation that holds, each at a 256-byte aligned offset
(``layout_regions``), the weights (uploaded once), the arena, the scratch, and a staging buffer
per model input and output for host arrays.  A call then:

- NumPy arrays (and CPU torch tensors): copied into the staging buffers, the launches run, the
  outputs copied back into new arrays (torch tensors when a torch tensor came in);
- torch CUDA tensors: their ``data_ptr()`` goes to the kernels as is, no copy, and the outputs are
  new torch CUDA tensors on the same device that the kernels write in place.

Kernel parameters are one device pointer per ``BufferRef`` of the launch, in order
(``launch_pointers``): the region's base plus the offset, or the call's input or output pointer
plus the offset.  When every pointer is fixed (host arrays in and out) the parameter arrays are
built once.  The stream is synchronised before a call returns; a kernel that faults is reported
by that synchronisation, which cannot say which kernel it was: ``TENSORFORGE_CUDA_SYNC=1``
synchronises after every launch so the error names it.

Nothing here needs a GPU until a ``CudaModel`` is made: the layout and pointer computations are
plain functions of the program (tested without a device), and ``cuda_device_available()`` answers
False, never raises, on a machine without a driver.
"""
from __future__ import annotations

import functools
import os
import statistics
import sys
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..codegen.cuda.nvrtc import CudaBinary, compile_cuda, import_binding
from ..codegen.gpu.program import GpuProgram, Launch, pack_regions
from ..errors import InputShapeError, TensorforgeError
from ..ir.types import DType
from .native import torch_dtype
from .arena_plan import aligned
from .signature import TensorSpec, host_array

ALIGN = 256                     # cudaMalloc's own alignment; every region starts at a multiple
SYNC_ENV = "TENSORFORGE_CUDA_SYNC"
_FIXED_REGIONS = ("weights", "arena", "scratch")


# ---- the device-memory plan (pure) -------------------------------------------------------------

@dataclass(frozen=True)
class DeviceLayout:
    """Byte offsets of every region inside the model's one device allocation of ``total`` bytes;
    ``inputs``/``outputs`` are the staging buffers for host arrays, one per model input/output."""

    weights: int
    arena: int
    scratch: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    total: int

    def offset(self, region: str) -> int:
        """The offset of a fixed region (``weights``, ``arena`` or ``scratch``)."""
        return getattr(self, region)


def layout_regions(program: GpuProgram) -> DeviceLayout:
    """Weights, arena, scratch, then each input's and each output's staging buffer, in that
    order, each starting at a multiple of 256 bytes (the total is at least 256: the driver does
    not allocate 0 bytes)."""
    sizes = [program.weights.nbytes, program.arena_bytes, program.scratch_bytes,
             *(t.nbytes for t in program.input_types), *(t.nbytes for t in program.output_types)]
    offsets, end = pack_regions(sizes, ALIGN)
    n_in = len(program.input_types)
    return DeviceLayout(offsets[0], offsets[1], offsets[2], tuple(offsets[3:3 + n_in]), tuple(offsets[3 + n_in:]),
                        max(aligned(end, ALIGN), ALIGN))


def region_bytes(program: GpuProgram, region: str, index: int = 0) -> int:
    """The size of a region (of input or output ``index``)."""
    if region == "input":
        return program.input_types[index].nbytes
    if region == "output":
        return program.output_types[index].nbytes
    return {"weights": program.weights.nbytes, "arena": program.arena_bytes,
            "scratch": program.scratch_bytes}[region]


def check_program(program: GpuProgram) -> None:
    """That ``program`` is one this runtime can run: CUDA, static shapes, and every launch's
    arguments inside their regions (a ``TensorforgeError`` naming the launch and argument)."""
    if program.language != "cuda":
        raise TensorforgeError(f"the CUDA runtime runs CUDA programs; this one is {program.language!r}")
    for what, types in (("input", program.input_types), ("output", program.output_types)):
        for i, t in enumerate(types):
            if not t.is_static:
                raise TensorforgeError(f"{what} #{i} has symbolic shape {t}: the CUDA runtime runs static shapes only")
    for n, launch in enumerate(program.launches):
        for a, ref in enumerate(launch.args):
            count = len(program.input_types) if ref.region == "input" else len(program.output_types)
            if ref.region in ("input", "output") and not 0 <= ref.index < count:
                raise TensorforgeError(f"launch #{n} ({launch.kernel}) argument {a} names {ref.region} {ref.index}, "
                                       f"but the program has {count}")
            size = region_bytes(program, ref.region, ref.index)
            if not 0 <= ref.offset <= size:
                raise TensorforgeError(f"launch #{n} ({launch.kernel}) argument {a} is at offset {ref.offset} of "
                                       f"{ref.region} {ref.index}, which holds {size} bytes")


def launch_pointers(launch: Launch, base: int, layout: DeviceLayout, inputs: Sequence[int],
                    outputs: Sequence[int]) -> list[int]:
    """The device pointer of each of ``launch``'s arguments, in order: ``base`` (the allocation)
    plus the region's offset plus the argument's, or the call's input/output pointer plus the
    argument's offset."""
    pointers = []
    for ref in launch.args:
        if ref.region == "input":
            start = inputs[ref.index]
        elif ref.region == "output":
            start = outputs[ref.index]
        else:
            start = base + layout.offset(ref.region)
        pointers.append(start + ref.offset)
    return pointers


def kernel_params(pointers: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``cuLaunchKernel``'s ``void** kernelParams`` for pointer arguments: ``(values, addresses)``
    where ``values`` holds the 64-bit pointers and ``addresses[i]`` is the address of
    ``values[i]``.  Pass ``addresses``; keep both alive until the launch returns (the driver copies
    the values at launch)."""
    values = np.array(pointers, dtype=np.uint64)
    addresses = values.ctypes.data + np.arange(len(values), dtype=np.uint64) * np.uint64(values.itemsize)
    return values, addresses.astype(np.uint64)


# ---- the driver -----------------------------------------------------------------------------------

VECTOR_ALIGN = 16          # bytes: what a float4 load of the GPU kernels assumes of every buffer


def _driver():
    """``cuda.bindings.driver``, or the ``ResourceError`` saying what to install (tests swap it)."""
    return import_binding("driver", "running CUDA needs the CUDA bindings")


@functools.lru_cache(maxsize=1)
def cuda_device_available() -> bool:
    """Whether a CUDA device can run kernels here: the bindings import, the driver loads and
    counts at least one device.  False, never an exception, without a GPU or a driver."""
    try:
        drv = _driver()
        if drv.cuInit(0)[0] != drv.CUresult.CUDA_SUCCESS:
            return False
        status, count = drv.cuDeviceGetCount()
        return status == drv.CUresult.CUDA_SUCCESS and count > 0
    except Exception:      # noqa: BLE001 - no libcuda.so (RuntimeError), no bindings, a broken install
        return False


def _error_text(drv, status) -> str:
    """``CUDA_ERROR_X: description`` (the enum's name alone when the driver cannot describe it)."""
    name = getattr(status, "name", str(status))
    try:
        err, text = drv.cuGetErrorString(status)
        if err == drv.CUresult.CUDA_SUCCESS and text:
            return f"{name}: {text.decode(errors='replace')}"
    except Exception:      # noqa: BLE001 - describing an error must not raise another
        pass
    return name


def check_call(drv, result: tuple, call: str, kernel: str | None = None):
    """The value a driver call returned with ``(status, value...)``; a ``TensorforgeError`` naming
    the call (and the kernel) when the status is not success."""
    status = result[0]
    if status != drv.CUresult.CUDA_SUCCESS:
        about = f" for kernel '{kernel}'" if kernel else ""
        raise TensorforgeError(f"CUDA {call}{about} failed: {_error_text(drv, status)}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


# ---- the model ----------------------------------------------------------------------------------

def loaded_torch():
    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    torch = loaded_torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_cuda_tensor(x: Any) -> bool:
    return _is_torch(x) and x.device.type == "cuda"


class _Call:
    """One call's pointers and what must stay alive until the stream is synchronised."""

    __slots__ = ("inputs", "outputs", "keep", "staged_inputs", "staged_outputs", "torch_device", "torch_out")

    def __init__(self):
        self.inputs: list[int] = []
        self.outputs: list[int] = []
        self.keep: list[Any] = []                                 # CUDA tensors whose memory the kernels use
        self.staged_inputs: list[tuple[int, np.ndarray]] = []     # (input index, host array) to copy in
        self.staged_outputs: list[tuple[int, np.ndarray]] = []    # (output index, host array) to copy back
        self.torch_device = None          # the CUDA device of torch inputs, if any
        self.torch_out = False            # results as torch tensors


class CudaModel:
    """A CUDA ``GpuProgram`` loaded on device ``device``; a call returns a list of outputs.

    ``inputs``/``outputs`` name the tensors in error messages (default ``input0``... from the
    program's types).  Calls are serialised (one staging area and one arena per model).
    ``close()`` (or ``with``) frees the device memory; the model cannot run afterwards.
    """

    def __init__(self, program: GpuProgram, binary: CudaBinary, inputs: Sequence[TensorSpec] | None = None,
                 outputs: Sequence[TensorSpec] | None = None, device: int = 0):
        check_program(program)
        self.program, self.binary, self.source = program, binary, program.source
        self.inputs = list(inputs) if inputs is not None else _specs(program.input_types, "input")
        self.outputs = list(outputs) if outputs is not None else _specs(program.output_types, "output")
        self.layout = layout_regions(program)
        self.device = device
        self.sync_each_launch = bool(os.environ.get(SYNC_ENV))
        self._lock = threading.Lock()
        self._closed = True               # until everything below is set up
        self._drv = _driver()
        self._dev = self._ctx = self._module = self._base = self.stream = None
        self._functions: dict[str, Any] = {}
        try:
            self._open()
        except BaseException:
            self._release(strict=False)
            raise
        self._staged = self._params(self._staging(self.layout.inputs), self._staging(self.layout.outputs))
        self._closed = False

    @classmethod
    def build(cls, program: GpuProgram, arch: str = "sm_90", options: Sequence[str] = (), **kwargs) -> "CudaModel":
        """Compiles ``program.source`` with NVRTC (cached) and loads it."""
        return cls(program, compile_cuda(program.source, arch, options), **kwargs)

    # ---- setting up -----------------------------------------------------------------------
    def _check(self, result: tuple, call: str, kernel: str | None = None):
        return check_call(self._drv, result, call, kernel)

    def _open(self) -> None:
        drv = self._drv
        self._check(drv.cuInit(0), "cuInit")
        self._dev = self._check(drv.cuDeviceGet(self.device), f"cuDeviceGet({self.device})")
        self._ctx = self._check(drv.cuDevicePrimaryCtxRetain(self._dev), "cuDevicePrimaryCtxRetain")
        self._check(drv.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
        self._module = self._check(drv.cuModuleLoadData(self.binary.cubin), "cuModuleLoadData")
        for name in dict.fromkeys(launch.kernel for launch in self.program.launches):
            self._functions[name] = self._check(drv.cuModuleGetFunction(self._module, name.encode()),
                                                "cuModuleGetFunction", name)
        self._base = self._check(drv.cuMemAlloc(self.layout.total),
                                 f"cuMemAlloc of {self.layout.total} bytes (weights, arena, scratch, staging)")
        weights = np.ascontiguousarray(self.program.weights).reshape(-1).view(np.uint8)
        if weights.nbytes:
            self._check(drv.cuMemcpyHtoD(int(self._base) + self.layout.weights, weights.ctypes.data, weights.nbytes),
                        "cuMemcpyHtoD of the weights")
        self.stream = self._check(drv.cuStreamCreate(0), "cuStreamCreate")

    def _staging(self, offsets: Sequence[int]) -> list[int]:
        return [int(self._base) + off for off in offsets]

    def _params(self, inputs: Sequence[int], outputs: Sequence[int]) -> list[tuple[Launch, Any, tuple]]:
        """Per launch: the launch, its function and its parameter arrays for these pointers."""
        base = int(self._base)
        return [(launch, self._functions[launch.kernel],
                 kernel_params(launch_pointers(launch, base, self.layout, inputs, outputs)))
                for launch in self.program.launches]

    # ---- calling --------------------------------------------------------------------------
    def __call__(self, *inputs) -> list:
        """Runs the model: one result per output, in order (as ``run``; like ``OpenCLModel``, a
        list even for one output: ``GpuModel`` unwraps it)."""
        return self.run(inputs)

    def run(self, inputs: Sequence[Any], out: Sequence[Any] | None = None) -> list:
        """Runs the model on ``inputs`` (NumPy arrays or torch tensors, in signature order).

        Returns NumPy arrays, torch CPU tensors when a CPU tensor came in, torch CUDA tensors when
        a CUDA tensor came in.  With ``out`` (NumPy arrays or torch CUDA tensors of the outputs'
        shapes and dtypes) the results are written there and ``out`` is returned as a list.
        """
        if len(inputs) != len(self.inputs):
            names = ", ".join(s.name for s in self.inputs)
            raise TensorforgeError(f"the model takes {len(self.inputs)} input(s) ({names}), got {len(inputs)}")
        with self._lock:
            if self._closed:
                raise TensorforgeError("this CUDA model was closed; compile or load it again")
            call = _Call()                 # every check first: a bad argument queues nothing
            for i, x in enumerate(inputs):
                self._place_input(call, i, x)
            results = self._place_outputs(call, out)
            self._check(self._drv.cuCtxSetCurrent(self._ctx), "cuCtxSetCurrent")
            try:
                self._copy_in(call)
                self._wait_for_torch(call)
                self._launch_all(call)
                self._copy_out(call)
            except BaseException:
                self._drv.cuStreamSynchronize(self.stream)    # nothing queued may outlive what it uses
                raise
            self._synchronize()
        if out is not None:
            return list(out)
        if call.torch_out and call.torch_device is None:
            return [loaded_torch().from_numpy(r) for r in results]
        return results

    def _place_input(self, call: _Call, i: int, x: Any) -> None:
        """The device pointer of input ``i`` for this call, after checking it: a CUDA tensor's
        own memory, or the staging buffer the host array is to be copied into."""
        spec = self.inputs[i]
        if _is_cuda_tensor(x):
            x = self._device_tensor(x, spec, f"input #{i} {spec.describe()}")
            call.inputs.append(x.data_ptr())
            call.keep.append(x)
            call.torch_device = x.device
            call.torch_out = True
            return
        if _is_torch(x):
            call.torch_out = True
            x = x.detach().numpy()
        host = self._host_array(x, spec, i)
        call.inputs.append(int(self._base) + self.layout.inputs[i])
        call.staged_inputs.append((i, host))

    def _copy_in(self, call: _Call) -> None:
        for i, host in call.staged_inputs:
            if host.nbytes:
                self._check(self._drv.cuMemcpyHtoDAsync(call.inputs[i], host.ctypes.data, host.nbytes, self.stream),
                            f"cuMemcpyHtoDAsync of input '{self.inputs[i].name}'")

    def _copy_out(self, call: _Call) -> None:
        for j, host in call.staged_outputs:
            if host.nbytes:
                self._check(self._drv.cuMemcpyDtoHAsync(host.ctypes.data, call.outputs[j], host.nbytes, self.stream),
                            f"cuMemcpyDtoHAsync of output '{self.outputs[j].name}'")

    def _device_tensor(self, x, spec: TensorSpec, what: str):
        """``x`` checked against ``spec`` (dtype, shape, device), contiguous."""
        want = torch_dtype(spec)
        if x.dtype != want:
            raise TensorforgeError(f"{what}: got a {x.dtype} tensor; convert it with .to({want})")
        if tuple(x.shape) != tuple(spec.shape):
            raise InputShapeError(f"{what}: got shape {list(x.shape)}; the model was compiled for {list(spec.shape)}")
        if (x.device.index or 0) != self.device:
            raise TensorforgeError(f"{what}: the tensor is on {x.device}; the model runs on cuda:{self.device}")
        x = x if x.is_contiguous() else x.contiguous()
        # vector loads (float4) need 16-byte aligned buffers; a view into another tensor may not be
        return x if x.data_ptr() % VECTOR_ALIGN == 0 else x.clone()

    def _host_array(self, x: Any, spec: TensorSpec, i: int) -> np.ndarray:
        """Input ``i`` as a C-contiguous NumPy array of the spec's dtype and shape."""
        what = f"input #{i} {spec.describe()}"
        _check_host_dtype(spec, what)
        return host_array(x, spec, what)

    def _place_outputs(self, call: _Call, out: Sequence[Any] | None) -> list:
        """The result objects and the pointers the kernels write: ``out=``'s, new torch CUDA
        tensors when a CUDA tensor came in, else the staging buffers (copied into new arrays)."""
        if out is not None:
            return self._place_out(call, out)
        results = []
        for j, spec in enumerate(self.outputs):
            if call.torch_device is not None:
                t = loaded_torch().empty(tuple(spec.shape), dtype=torch_dtype(spec), device=call.torch_device)
                call.outputs.append(t.data_ptr())
                results.append(t)
                continue
            _check_host_dtype(spec, f"output #{j} {spec.describe()}")
            host = np.empty(tuple(spec.shape), spec.np_dtype)
            call.outputs.append(int(self._base) + self.layout.outputs[j])
            call.staged_outputs.append((j, host))
            results.append(host)
        return results

    def _place_out(self, call: _Call, out: Sequence[Any]) -> list:
        if len(out) != len(self.outputs):
            raise TensorforgeError(f"out= needs {len(self.outputs)} array(s), got {len(out)}")
        for j, (o, spec) in enumerate(zip(out, self.outputs)):
            what = f"out[{j}] for output {spec.describe()}"
            if _is_cuda_tensor(o):
                if not o.is_contiguous():
                    raise TensorforgeError(f"{what}: must be a contiguous tensor")
                call.outputs.append(self._device_tensor(o, spec, what).data_ptr())
                continue
            _check_host_dtype(spec, what)
            if not isinstance(o, np.ndarray) or o.dtype != spec.np_dtype or o.shape != tuple(spec.shape) \
                    or not (o.flags.c_contiguous and o.flags.writeable):
                raise TensorforgeError(f"{what}: this call needs a writeable np.empty({tuple(spec.shape)}, "
                                       f"np.{spec.np_dtype}) or a contiguous CUDA tensor")
            call.outputs.append(int(self._base) + self.layout.outputs[j])
            call.staged_outputs.append((j, o))
        return list(out)

    def _wait_for_torch(self, call: _Call) -> None:
        """Torch's pending work on the inputs must finish first.  The model's stream is a blocking
        stream, ordered after torch's default (legacy) stream by the driver; a caller on another
        torch stream is waited for here."""
        if call.torch_device is None:
            return
        stream = loaded_torch().cuda.current_stream(call.torch_device)
        if stream.cuda_stream != 0:
            stream.synchronize()

    def _launch_all(self, call: _Call) -> None:
        staged = (call.inputs == self._staging(self.layout.inputs)
                  and call.outputs == self._staging(self.layout.outputs))
        params = self._staged if staged else self._params(call.inputs, call.outputs)
        drv = self._drv
        for launch, function, (_, addresses) in params:
            self._check(drv.cuLaunchKernel(function, *launch.grid, *launch.block, 0, self.stream,
                                           addresses if len(addresses) else None, 0),
                        f"cuLaunchKernel(grid={launch.grid}, block={launch.block})", launch.kernel)
            if self.sync_each_launch:
                self._check(drv.cuStreamSynchronize(self.stream), "cuStreamSynchronize after the launch", launch.kernel)

    def _synchronize(self) -> None:
        try:
            self._check(self._drv.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        except TensorforgeError as exc:
            if self.sync_each_launch:
                raise
            raise TensorforgeError(f"{exc} (a kernel of this call failed; set {SYNC_ENV}=1 to find which)") from None

    # ---- closing --------------------------------------------------------------------------
    def close(self) -> None:
        """Frees the device memory, the stream and the module, and releases the context."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release(strict=True)

    def _release(self, strict: bool) -> None:
        """Frees what ``_open`` got, in reverse; with ``strict`` the first failure is raised after
        everything was tried."""
        drv, failures = self._drv, []
        steps = (("cuStreamDestroy", self.stream, drv.cuStreamDestroy), ("cuMemFree", self._base, drv.cuMemFree),
                 ("cuModuleUnload", self._module, drv.cuModuleUnload),
                 ("cuDevicePrimaryCtxRelease", self._ctx, lambda _: drv.cuDevicePrimaryCtxRelease(self._dev)))
        for call, handle, release in steps:
            if handle is not None:
                try:
                    check_call(drv, release(handle), call)
                except Exception as exc:      # noqa: BLE001 - keep releasing the rest
                    failures.append(exc)
        self.stream = self._base = self._module = self._ctx = None
        if strict and failures:
            raise failures[0]

    def __enter__(self) -> "CudaModel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:      # noqa: BLE001 - a half-made model, or the driver gone at exit
            pass


def _specs(types: Sequence, prefix: str) -> list[TensorSpec]:
    return [TensorSpec.from_type(f"{prefix}{i}", t) for i, t in enumerate(types)]


def _check_host_dtype(spec: TensorSpec, what: str) -> None:
    """Host arrays must hold the device's bytes: a type NumPy holds wider (bf16 as f32, the 8-bit
    floats) can only come in as a torch CUDA tensor."""
    if spec.np_dtype.itemsize != DType.parse(spec.dtype).itemsize:
        raise TensorforgeError(f"{what}: {spec.dtype} has no NumPy type of its size; pass a torch CUDA tensor")


def time_call(model: CudaModel, inputs: Sequence[Any], warmup: int = 3, repeats: int = 20) -> float:
    """Median milliseconds of ``model(*inputs)``, measured by CUDA events on the model's stream
    around each call after ``warmup`` untimed calls (copies in and out included for host arrays)."""
    drv = model._drv
    for _ in range(warmup):
        model(*inputs)
    start = check_call(drv, drv.cuEventCreate(0), "cuEventCreate")
    end = check_call(drv, drv.cuEventCreate(0), "cuEventCreate")
    samples = []
    try:
        for _ in range(max(1, repeats)):
            check_call(drv, drv.cuEventRecord(start, model.stream), "cuEventRecord")
            model(*inputs)
            check_call(drv, drv.cuEventRecord(end, model.stream), "cuEventRecord")
            check_call(drv, drv.cuEventSynchronize(end), "cuEventSynchronize")
            samples.append(check_call(drv, drv.cuEventElapsedTime(start, end), "cuEventElapsedTime"))
    finally:
        drv.cuEventDestroy(start)
        drv.cuEventDestroy(end)
    return float(statistics.median(samples))
