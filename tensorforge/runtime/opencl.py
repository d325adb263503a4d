"""Runs a ``GpuProgram`` printed as OpenCL C on an OpenCL device, through pyopencl.

The program's contract (``codegen/gpu/program.py``, docs/gpu.md) says where every kernel argument
lives; this module turns it into device memory and launches once, at construction, so that a call
does the least work it can: enqueue the input writes, the launches and the output reads on one
in-order queue, then wait.

- **One allocation** holds the weights, the arena and the scratch, each region at an offset aligned
  to the device's base-address alignment (and to at least 256 bytes), so what the memory plan
  aligned within a region stays aligned on the device.  The weights are uploaded once.
- **One buffer per model input and output**, allocated once (at least one byte: OpenCL has no
  empty buffers).
- **One ``cl.Kernel`` per launch**, its arguments set once: every kernel argument is a
  ``__global uchar*`` base and a ``long`` byte offset (the OpenCL printer's convention), and both
  are fixed for the model's life.  A kernel object holds its arguments, so two launches of one
  function get two objects.

A model owns one set of device buffers, so its calls are serialised (a lock); make one model per
thread to run calls side by side.  NumPy arrays and CPU torch tensors are accepted; torch in gives
torch out, as ``native.py`` does.

pyopencl is imported on first use: this module imports without it, ``opencl_available()`` then
says False and everything else raises a ``TensorforgeError`` that says what to install.  The
device is the one ``$TENSORFORGE_OPENCL_DEVICE`` names (a substring of the device's or platform's
name), else the first GPU, else the first device of any kind (PoCL runs OpenCL on the CPU).

Some drivers take the whole process down on a kernel they mishandle (PoCL aborts on a barrier under
a thread-dependent branch), so ``run_isolated`` runs a program in a child process and turns such a
crash into an error.
"""
from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import re
import threading
import time
import warnings
from typing import Any, Sequence

import numpy as np

from ..codegen.gpu.program import BufferRef, GpuProgram, Launch, pack_regions
from ..errors import CompileError, TensorforgeError
from .native import loaded_torch
from .signature import TensorSpec, host_inputs

ENV_DEVICE = "TENSORFORGE_OPENCL_DEVICE"
MIN_ALIGN = 256                   # bytes: the least alignment of a region in the device allocation
LOG_LINES = 40                    # build-log lines a CompileError shows
_INSTALL = ("install an OpenCL driver (on Debian/Ubuntu `apt-get install pocl-opencl-icd` runs OpenCL on "
            "the CPU; GPU vendors ship their own) and pyopencl (`pip install 'tensorforge[opencl]'`)")

_lock = threading.Lock()
_contexts: dict[Any, Any] = {}                  # device -> its shared cl.Context
_programs: dict[tuple, tuple[Any, Any]] = {}    # (source sha256, options, device) -> (context, program)


# ---- devices ---------------------------------------------------------------------------------
def _cl():
    """The pyopencl module, or an error saying how to get it."""
    try:
        import pyopencl
    except ImportError as exc:
        raise TensorforgeError(f"the OpenCL runtime needs pyopencl, which cannot be imported ({exc}); "
                               f"{_INSTALL}") from None
    return pyopencl


def _devices() -> list:
    """Every device of every platform, in the order the driver lists them; [] without a platform."""
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:                  # the ICD loader found no platform
        return []
    found: list = []
    for platform in platforms:
        try:
            found.extend(platform.get_devices())
        except cl.Error:              # a platform without devices
            continue
    return found


def opencl_available() -> bool:
    """Whether pyopencl imports and at least one OpenCL device exists; never raises."""
    try:
        return bool(_devices())
    except Exception:
        return False


def _kind(device) -> str:
    cl = _cl()
    for flag, word in ((cl.device_type.GPU, "GPU"), (cl.device_type.CPU, "CPU"),
                       (cl.device_type.ACCELERATOR, "accelerator")):
        if device.type & flag:
            return word
    return "other"


def describe_device(device) -> str:
    """``'NVIDIA H200' (GPU) on 'NVIDIA CUDA'``: for messages and reports."""
    return f"'{device.name.strip()}' ({_kind(device)}) on '{device.platform.name.strip()}'"


def _existing_devices() -> list:
    """The devices, or the error that says there are none and what to install."""
    devices = _devices()
    if not devices:
        raise TensorforgeError(f"no OpenCL platform or device found; {_INSTALL}")
    return devices


def find_device(pattern: str, origin: str = ""):
    """The first device whose name or platform name contains ``pattern`` (any case)."""
    devices = _existing_devices()
    needle = pattern.lower()
    for device in devices:
        if needle in device.name.lower() or needle in device.platform.name.lower():
            return device
    listed = "; ".join(describe_device(d) for d in devices)
    raise TensorforgeError(f"no OpenCL device matches '{pattern}'{origin}; the devices are: {listed}")


def default_device():
    """``$TENSORFORGE_OPENCL_DEVICE``'s device if set, else the first GPU, else the first device."""
    pattern = os.environ.get(ENV_DEVICE, "").strip()
    if pattern:
        return find_device(pattern, f" (${ENV_DEVICE})")
    devices = _existing_devices()
    gpus = [d for d in devices if d.type & _cl().device_type.GPU]
    return (gpus or devices)[0]


def _resolve(device):
    """A device from a device, a name pattern or None (the default)."""
    if device is None:
        return default_device()
    if isinstance(device, str):
        return find_device(device)
    return device


def device_limits(device=None) -> dict[str, Any]:
    """What a ``GpuTarget`` for this device is sized by: ``name``, ``max_work_group_size``,
    ``local_mem_size`` (bytes), ``max_work_item_sizes`` (per axis) and ``mem_base_addr_align``
    (bytes)."""
    device = _resolve(device)
    return {"name": device.name.strip(),
            "max_work_group_size": int(device.max_work_group_size),
            "local_mem_size": int(device.local_mem_size),
            "max_work_item_sizes": tuple(int(n) for n in device.max_work_item_sizes),
            "mem_base_addr_align": region_alignment(device)}


def region_alignment(device) -> int:
    """Bytes each region of the device allocation is aligned to (the device reports bits)."""
    return max(MIN_ALIGN, int(device.mem_base_addr_align) // 8)


# ---- programs --------------------------------------------------------------------------------
def _context(device):
    """One context per device for the whole process: programs built for it are shared."""
    ctx = _contexts.get(device)
    if ctx is None:
        ctx = _contexts[device] = _cl().Context([device])
    return ctx


def build_program(source: str, device=None, options: Sequence[str] = ()) -> tuple[Any, Any]:
    """(context, built ``cl.Program``) for ``source`` on ``device``, built once per process for
    each (source, options, device); a build failure is a ``CompileError`` with the build log."""
    device = _resolve(device)
    options = tuple(options)
    key = (hashlib.sha256(source.encode()).hexdigest(), options, device)
    with _lock:
        built = _programs.get(key)
        if built is None:
            ctx = _context(device)
            built = _programs[key] = (ctx, _build(ctx, device, source, options))
    return built


def _build(ctx, device, source: str, options: tuple[str, ...]):
    cl = _cl()
    program = cl.Program(ctx, source)
    try:
        with warnings.catch_warnings():          # pyopencl warns about any non-empty build log
            warnings.simplefilter("ignore", cl.CompilerWarning)
            program.build(options=list(options), devices=[device])
    except cl.Error as exc:
        raise CompileError(_build_failure(program, device, source, exc)) from None
    return program


def _build_failure(program, device, source: str, exc: Exception) -> str:
    """The message of a failed build: which kernels, which device, the first lines of the log."""
    cl = _cl()
    try:
        log = program.get_build_info(device, cl.program_build_info.LOG)
    except cl.Error:
        log = ""
    # drivers compile a temporary copy: name it as what it is
    lines = re.sub(r"[^\s:]+\.cl(?=:\d)", "<source>", log or str(exc)).strip().splitlines()
    shown = "\n".join(lines[:LOG_LINES])
    more = f"\n... ({len(lines) - LOG_LINES} more lines)" if len(lines) > LOG_LINES else ""
    kernels = ", ".join(re.findall(r"__kernel\s+void\s+(\w+)", source)) or "none found"
    return (f"the OpenCL program (kernels: {kernels}) failed to build on {describe_device(device)}; "
            f"the build log (lines of <source> are lines of GpuProgram.source):\n{shown}{more}")


# ---- models ----------------------------------------------------------------------------------
def _specs(types: Sequence, names: Sequence[str] | None, kind: str) -> list[TensorSpec]:
    """The TensorSpecs of a program's inputs or outputs, refusing what this runtime cannot pass."""
    names = list(names) if names is not None else [f"{kind}{i}" for i in range(len(types))]
    if len(names) != len(types):
        raise TensorforgeError(f"{len(names)} {kind} name(s) given for {len(types)} {kind}(s)")
    specs = []
    for name, t in zip(names, types):
        if not t.is_static:
            raise TensorforgeError(f"{kind} '{name}' {t}: the OpenCL runtime runs static shapes only")
        if t.dtype.np.itemsize != t.dtype.itemsize:
            raise TensorforgeError(f"{kind} '{name}' {t}: the OpenCL runtime cannot pass {t.dtype} values yet "
                                   f"(held as {t.dtype.np} on the host, {t.dtype.itemsize} byte(s) on the device)")
        specs.append(TensorSpec.from_type(name, t))
    return specs


def _layout(sizes: dict[str, int], align: int) -> dict[str, tuple[int, int]]:
    """(offset, bytes) of each region, in order, each offset a multiple of ``align``."""
    offsets, _ = pack_regions(list(sizes.values()), align)
    return {name: (start, int(n)) for (name, n), start in zip(sizes.items(), offsets)}


class OpenCLModel:
    """A ``GpuProgram`` (language "opencl") ready to run on one device.

    ``device``: a pyopencl device, a substring of a device or platform name, or None for
    ``default_device()``.  ``input_names``/``output_names`` name the tensors in error messages
    (default ``input0``..., ``output0``...).  ``model(*inputs)`` returns a list with one array per
    output (torch tensors when an input was a torch tensor).
    """

    def __init__(self, program: GpuProgram, device=None, *, input_names: Sequence[str] | None = None,
                 output_names: Sequence[str] | None = None):
        if program.language != "opencl":
            raise TensorforgeError(f"OpenCLModel runs OpenCL programs; this one is {program.language!r}")
        cl = _cl()
        self.program = program
        self.device = _resolve(device)
        self.inputs = _specs(program.input_types, input_names, "input")
        self.outputs = _specs(program.output_types, output_names, "output")
        self.context, self.cl_program = build_program(program.source, self.device)
        self.queue = cl.CommandQueue(self.context, self.device)
        weights = np.ascontiguousarray(program.weights).reshape(-1).view(np.uint8)
        self.regions = _layout({"weights": weights.nbytes, "arena": program.arena_bytes,
                                "scratch": program.scratch_bytes}, region_alignment(self.device))
        offset, nbytes = self.regions["scratch"]
        self._memory = self._buffer(offset + nbytes, "the weights, arena and scratch")
        if weights.nbytes:
            cl.enqueue_copy(self.queue, self._memory, weights, is_blocking=True)
        self._in_buffers = [self._buffer(t.nbytes, f"input '{s.name}'")
                            for t, s in zip(program.input_types, self.inputs)]
        self._out_buffers = [self._buffer(t.nbytes, f"output '{s.name}'")
                             for t, s in zip(program.output_types, self.outputs)]
        self._out_specs = [(s.shape, s.np_dtype) for s in self.outputs]
        # (kernel with its arguments set, global size, local size, launch) per non-empty launch
        self._launches = [self._prepare(n, launch) for n, launch in enumerate(program.launches)
                          if all(launch.grid)]
        self._call_lock = threading.Lock()

    def __repr__(self) -> str:
        return (f"OpenCLModel({len(self.program.launches)} launch(es) on {describe_device(self.device)}, "
                f"{len(self.inputs)} input(s), {len(self.outputs)} output(s))")

    # ---- construction ---------------------------------------------------------------------
    def _buffer(self, nbytes: int, what: str):
        """A device buffer of ``nbytes`` (at least 1: OpenCL has no empty buffers)."""
        cl = _cl()
        limit = int(self.device.max_mem_alloc_size)
        if nbytes > limit:
            raise TensorforgeError(f"cannot allocate {nbytes} bytes for {what} on {describe_device(self.device)}: "
                                   f"one buffer may hold at most {limit} bytes; compile a smaller model")
        try:
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(int(nbytes), 1))
        except cl.Error as exc:
            raise TensorforgeError(f"cannot allocate {nbytes} bytes for {what} on "
                                   f"{describe_device(self.device)}: {exc}") from None

    def _prepare(self, n: int, launch: Launch):
        """Launch ``n``'s kernel object with its arguments set, and its global and local sizes."""
        kernel = self._kernel(n, launch)
        args: list = []
        for k, ref in enumerate(launch.args):
            buffer, offset = self._place(n, k, ref)
            args += [buffer, np.int64(offset)]
        kernel.set_args(*args)
        self._check_block(n, launch)
        global_size = tuple(g * b for g, b in zip(launch.grid, launch.block))
        return kernel, global_size, tuple(launch.block), launch

    def _kernel(self, n: int, launch: Launch):
        cl = _cl()
        try:
            kernel = cl.Kernel(self.cl_program, launch.kernel)
        except cl.Error:
            names = self.cl_program.get_info(cl.program_info.KERNEL_NAMES).replace(";", ", ")
            raise CompileError(f"launch #{n} runs kernel '{launch.kernel}', which the program does not define "
                               f"(it defines: {names or 'nothing'})") from None
        if kernel.num_args != 2 * len(launch.args):
            raise CompileError(f"launch #{n}: kernel '{launch.kernel}' takes {kernel.num_args} parameters, but the "
                               f"launch passes {len(launch.args)} buffer(s), two parameters each "
                               f"(__global uchar* base, long byte offset)")
        return kernel

    def _place(self, n: int, k: int, ref: BufferRef) -> tuple[Any, int]:
        """(device buffer, byte offset in it) of argument ``k`` of launch ``n``, bounds-checked."""
        if ref.region in ("input", "output"):
            buffers = self._in_buffers if ref.region == "input" else self._out_buffers
            if not 0 <= ref.index < len(buffers):
                raise TensorforgeError(f"launch #{n} argument {k}: {ref.region} #{ref.index} does not exist "
                                       f"(the program has {len(buffers)})")
            types = self.program.input_types if ref.region == "input" else self.program.output_types
            buffer, (start, size) = buffers[ref.index], (0, types[ref.index].nbytes)
        else:
            buffer, (start, size) = self._memory, self.regions[ref.region]
        if not 0 <= ref.offset <= size:
            raise TensorforgeError(f"launch #{n} argument {k}: offset {ref.offset} is outside the {ref.region} "
                                   f"region ({size} bytes)")
        return buffer, start + ref.offset

    def _check_block(self, n: int, launch: Launch) -> None:
        limits = device_limits(self.device)
        fits = launch.threads <= limits["max_work_group_size"] and all(
            b <= m for b, m in zip(launch.block, limits["max_work_item_sizes"]))
        if not fits or min(launch.block) < 1:
            raise TensorforgeError(f"launch #{n} of '{launch.kernel}': work-group {launch.block} does not fit "
                                   f"{describe_device(self.device)} (at most {limits['max_work_group_size']} "
                                   f"work-items, {limits['max_work_item_sizes']} per axis); compile for a target "
                                   f"sized from device_limits()")

    # ---- calls ----------------------------------------------------------------------------
    def __call__(self, *inputs) -> list:
        """Runs the model: one array per output, in order (torch tensors for torch inputs)."""
        arrays, as_torch = self._host_inputs(inputs)
        outs = [np.empty(shape, dtype) for shape, dtype in self._out_specs]
        with self._call_lock:
            self._run(arrays, outs)
        if as_torch:
            from_numpy = loaded_torch().from_numpy
            return [from_numpy(o) for o in outs]
        return outs

    def _run(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Inputs in, every launch in order, outputs out, on the one in-order queue; then waits."""
        cl = _cl()
        queue = self.queue
        for buffer, a in zip(self._in_buffers, arrays):
            if a.nbytes:
                cl.enqueue_copy(queue, buffer, a, is_blocking=False)
        for kernel, global_size, local_size, launch in self._launches:
            try:
                cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)
            except cl.Error as exc:
                queue.finish()
                raise TensorforgeError(f"launching kernel '{launch.kernel}' (grid {launch.grid}, block "
                                       f"{launch.block}) on {describe_device(self.device)} failed: {exc}") from None
        for buffer, o in zip(self._out_buffers, outs):
            if o.nbytes:
                cl.enqueue_copy(queue, o, buffer, is_blocking=False)
        queue.finish()

    def _host_inputs(self, inputs: Sequence[Any]) -> tuple[list[np.ndarray], bool]:
        return host_inputs(self.inputs, inputs)


def time_call(model: OpenCLModel, inputs: Sequence[Any], warmup: int = 3, repeats: int = 10) -> float:
    """Median wall time of ``model(*inputs)`` in milliseconds (a call waits for its outputs, so
    this is the time a caller sees: copies in, launches, copies out)."""
    if repeats < 1:
        raise TensorforgeError(f"repeats must be at least 1, got {repeats}")
    for _ in range(warmup):
        model(*inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(*inputs)
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


# ---- running in a child process ----------------------------------------------------------------
def run_isolated(program: GpuProgram, inputs: Sequence[np.ndarray], device=None,
                 timeout: float = 300.0) -> list[np.ndarray]:
    """``OpenCLModel(program, device)(*inputs)`` in a fresh child process: a kernel that crashes the
    driver (and with it the process) becomes a ``TensorforgeError`` here instead.  Errors raised in
    the child (a ``CompileError``, a bad input) are raised again here.  Slower than a model (a new
    process, context and build per call): for checking generated kernels, not for serving."""
    index = _devices().index(_resolve(device))          # devices are not picklable; their order is stable
    arrays = [np.asarray(x) for x in inputs]
    # IR types do not pickle: the child gets the program without them and rebuilds them from specs
    specs = [[TensorSpec.from_type(f"{kind}{i}", t) for i, t in enumerate(types)]
             for kind, types in (("input", program.input_types), ("output", program.output_types))]
    bare = dataclasses.replace(program, input_types=[], output_types=[])
    ctx = multiprocessing.get_context("spawn")          # no fork: a forked OpenCL driver is undefined
    receiver, sender = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_isolated_main, args=(sender, bare, specs, arrays, index), daemon=True)
    child.start()
    sender.close()
    try:
        if not receiver.poll(timeout):
            raise TensorforgeError(f"the child process running the OpenCL program gave no result within "
                                   f"{timeout:g} s and was stopped: a kernel probably never ends (PoCL can hang "
                                   f"on a barrier under a thread-dependent branch)")
        ok, value = receiver.recv()
    except EOFError:
        child.join(timeout=10)
        raise TensorforgeError(_crash_message(child.exitcode)) from None
    finally:
        receiver.close()
        if child.is_alive():
            child.kill()
        child.join(timeout=10)
    if not ok:
        raise value
    return value


def _crash_message(code: int | None) -> str:
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    return (f"the child process running the OpenCL program ended without a result ({how}): the driver "
            f"probably crashed on one of its kernels (PoCL aborts on a barrier under a thread-dependent branch)")


def _isolated_main(sender, bare: GpuProgram, specs: list[list[TensorSpec]], arrays: list[np.ndarray],
                   index: int) -> None:
    """The child of ``run_isolated``: runs the model and sends (True, outputs) or (False, error)."""
    try:
        program = dataclasses.replace(bare, input_types=[s.tensor_type for s in specs[0]],
                                      output_types=[s.tensor_type for s in specs[1]])
        result: tuple = (True, OpenCLModel(program, _devices()[index])(*arrays))
    except TensorforgeError as exc:
        result = (False, exc)
    except Exception as exc:                  # anything else travels as text
        result = (False, TensorforgeError(f"{type(exc).__name__}: {exc}"))
    sender.send(result)
    sender.close()
