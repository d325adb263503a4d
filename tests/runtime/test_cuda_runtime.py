"""The CUDA runtime: the device-memory layout and kernel arguments of a hand-made GpuProgram
(pure functions), the whole call path against a simulated driver, and, where a GPU is present,
the same program compiled by NVRTC and run for real."""
from __future__ import annotations

import ctypes
import enum
import itertools

import numpy as np
import pytest

from tensorforge.codegen.cuda.nvrtc import CudaBinary, KernelResources, check_resources, compile_cuda, nvrtc_available
from tensorforge.codegen.gpu.program import BufferRef, GpuProgram, KernelInfo, Launch
from tensorforge.codegen.target import GpuTarget
from tensorforge.errors import InputShapeError, TensorforgeError
from tensorforge.ir.types import tensor
from tensorforge.runtime import cuda as cuda_runtime
from tensorforge.runtime.cuda import (ALIGN, CudaModel, check_program, cuda_device_available, kernel_params,
                                      launch_pointers, layout_regions, time_call)

ROWS, COLS = 4, 8

# t = x * w (per column), then y = t + c (per row) and z = row sums of y.  Weights: w f32[8] at
# byte 0, c f32[4] at byte 32.  The arena holds t.
SOURCE = r"""
extern "C" __global__ void scale(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ t) {
    int i = blockIdx.x * 8 + threadIdx.x;
    t[i] = x[i] * w[threadIdx.x];
}

extern "C" __global__ void finish(const float* __restrict__ t, const float* __restrict__ c,
                                  float* __restrict__ y, float* __restrict__ z) {
    __shared__ float row[8];
    int i = blockIdx.x * 8 + threadIdx.x;
    float v = t[i] + c[blockIdx.x];
    y[i] = v;
    row[threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float s = 0.0f;
        for (int k = 0; k < 8; k++) s += row[k];
        z[blockIdx.x] = s;
    }
}
"""


def make_program(weights: np.ndarray | None = None) -> GpuProgram:
    if weights is None:
        weights = np.concatenate([np.arange(1, COLS + 1, dtype=np.float32),
                                  np.array([10, 20, 30, 40], np.float32)])
    launches = [
        Launch("scale", (ROWS, 1, 1), (COLS, 1, 1), (BufferRef("input"), BufferRef("weights"), BufferRef("arena"))),
        Launch("finish", (ROWS, 1, 1), (COLS, 1, 1),
               (BufferRef("arena"), BufferRef("weights", 32), BufferRef("output", 0, 0), BufferRef("output", 0, 1))),
    ]
    kernels = {"scale": KernelInfo("scale", "", COLS, 0), "finish": KernelInfo("finish", "", COLS, 4 * COLS)}
    return GpuProgram("cuda", SOURCE, launches, kernels, weights.view(np.uint8), arena_bytes=ROWS * COLS * 4,
                      scratch_bytes=0, input_types=[tensor((ROWS, COLS))],
                      output_types=[tensor((ROWS, COLS)), tensor((ROWS,))])


def reference(x: np.ndarray, program: GpuProgram) -> tuple[np.ndarray, np.ndarray]:
    w = program.weights.view(np.float32)
    y = x * w[:COLS] + w[COLS:, None]
    return y, y.sum(axis=1)


# ---- pure: layout and arguments ----------------------------------------------------------------

def test_layout_puts_each_region_at_a_256_byte_boundary():
    layout = layout_regions(make_program())
    # weights 48 B at 0, arena 128 B at 256, scratch 0 B at 512, input 128 B at 512,
    # outputs 128 B at 768 and 16 B at 1024
    assert (layout.weights, layout.arena, layout.scratch) == (0, 256, 512)
    assert layout.inputs == (512,)
    assert layout.outputs == (768, 1024)
    assert layout.total == 1280
    offsets = [layout.weights, layout.arena, layout.scratch, *layout.inputs, *layout.outputs]
    assert all(o % ALIGN == 0 for o in offsets)


def test_empty_program_still_allocates_something():
    empty = GpuProgram("cuda", "", [], {}, np.zeros(0, np.uint8), 0, 0)
    assert layout_regions(empty).total == ALIGN


def test_launch_pointers_add_region_and_argument_offsets():
    program = make_program()
    layout = layout_regions(program)
    base = 0x7F00_0000_0000
    x, y, z = 0x1000_0000, 0x2000_0000, 0x3000_0000
    scale, finish = program.launches
    assert launch_pointers(scale, base, layout, [x], [y, z]) == [x, base, base + 256]
    assert launch_pointers(finish, base, layout, [x], [y, z]) == [base + 256, base + 32, y, z]


def test_kernel_params_point_at_the_values():
    values, addresses = kernel_params([0x1234, 0xDEAD_BEEF_0000, 0])
    assert values.dtype == addresses.dtype == np.uint64
    assert [ctypes.c_uint64.from_address(int(a)).value for a in addresses] == [0x1234, 0xDEAD_BEEF_0000, 0]


@pytest.mark.parametrize("change, message", [
    (lambda p: p.launches.append(Launch("finish", (1, 1, 1), (1, 1, 1), (BufferRef("output", 0, 2),))),
     "names output 2, but the program has 2"),
    (lambda p: p.launches.append(Launch("scale", (1, 1, 1), (1, 1, 1), (BufferRef("arena", 512),))),
     "offset 512 of arena 0, which holds 128 bytes"),
    (lambda p: setattr(p, "language", "opencl"), "'opencl'"),
    (lambda p: setattr(p, "input_types", [tensor(("batch", COLS))]), "symbolic shape"),
])
def test_check_program_refuses_what_cannot_run(change, message):
    program = make_program()
    change(program)
    with pytest.raises(TensorforgeError, match=message):
        check_program(program)


def test_cuda_device_available_is_a_bool_never_an_error():
    assert cuda_device_available() in (True, False)


# ---- the call path against a simulated driver ---------------------------------------------------

class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_NOT_FOUND = 500


def _floats(address: int, n: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_float * n).from_address(address))


def _scale(grid, block, x, w, t):
    n = grid[0] * block[0]
    _floats(t, n)[:] = _floats(x, n) * np.tile(_floats(w, block[0]), grid[0])


def _finish(grid, block, t, c, y, z):
    n = grid[0] * block[0]
    rows = _floats(t, n).reshape(grid[0], block[0]) + _floats(c, grid[0])[:, None]
    _floats(y, n)[:] = rows.reshape(-1)
    _floats(z, grid[0])[:] = rows.sum(axis=1)


class FakeDriver:
    """Enough of ``cuda.bindings.driver`` to run the call path on the host: device memory is host
    memory, a kernel is a Python function of its pointers, and every call is recorded."""

    CUresult = CUresult
    KERNELS = {"scale": _scale, "finish": _finish}

    def __init__(self, fail: str | None = None):
        self.fail = fail                    # the name of a call to fail
        self.calls: list[str] = []
        self.memory: dict[int, np.ndarray] = {}
        self.launched: list[tuple[str, list[int]]] = []
        self._handles = itertools.count(1)

    def __getattr__(self, name):
        if not name.startswith("cu"):
            raise AttributeError(name)
        impl = getattr(self, "_" + name)

        def call(*args):
            self.calls.append(name)
            if name == self.fail:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            return impl(*args)
        return call

    def _cuInit(self, flags):
        return (CUresult.CUDA_SUCCESS,)

    def _cuDeviceGet(self, ordinal):
        return CUresult.CUDA_SUCCESS, ordinal

    def _cuDevicePrimaryCtxRetain(self, dev):
        return CUresult.CUDA_SUCCESS, f"ctx{dev}"

    _cuDevicePrimaryCtxRelease = _cuCtxSetCurrent = _cuInit

    def _cuModuleLoadData(self, image):
        return CUresult.CUDA_SUCCESS, ("module", bytes(image))

    def _cuModuleGetFunction(self, module, name):
        if name.decode() not in self.KERNELS:
            return CUresult.CUDA_ERROR_NOT_FOUND, None
        return CUresult.CUDA_SUCCESS, name.decode()

    def _cuModuleUnload(self, module):
        return (CUresult.CUDA_SUCCESS,)

    def _cuMemAlloc(self, nbytes):
        block = np.zeros(nbytes, np.uint8)
        self.memory[block.ctypes.data] = block
        return CUresult.CUDA_SUCCESS, block.ctypes.data

    def _cuMemFree(self, pointer):
        del self.memory[int(pointer)]
        return (CUresult.CUDA_SUCCESS,)

    def _cuMemcpyHtoD(self, dst, src, nbytes, stream=None):
        ctypes.memmove(int(dst), int(src), nbytes)
        return (CUresult.CUDA_SUCCESS,)

    _cuMemcpyHtoDAsync = _cuMemcpyDtoHAsync = _cuMemcpyHtoD

    def _cuStreamCreate(self, flags):
        return CUresult.CUDA_SUCCESS, "stream"

    def _cuStreamDestroy(self, stream):
        return (CUresult.CUDA_SUCCESS,)

    _cuStreamSynchronize = _cuStreamDestroy

    def _cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        pointers = [ctypes.c_uint64.from_address(int(a)).value for a in params]
        self.launched.append((f, pointers))
        self.KERNELS[f]((gx, gy, gz), (bx, by, bz), *pointers)
        return (CUresult.CUDA_SUCCESS,)

    def _cuEventCreate(self, flags):
        return CUresult.CUDA_SUCCESS, next(self._handles)

    def _cuEventRecord(self, event, stream):
        return (CUresult.CUDA_SUCCESS,)

    _cuEventSynchronize = _cuEventDestroy = _cuStreamDestroy

    def _cuEventElapsedTime(self, start, end):
        return CUresult.CUDA_SUCCESS, 0.25 * end

    def _cuGetErrorString(self, status):
        return CUresult.CUDA_SUCCESS, b"simulated failure"


BINARY = CudaBinary(b"\x7fELF-fake", "", {"scale": KernelResources(registers=8),
                                           "finish": KernelResources(registers=12, shared_bytes=32, barriers=1)},
                    "0" * 64, False)


@pytest.fixture
def fake(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(cuda_runtime, "_driver", lambda: driver)
    return driver


def test_numpy_call_runs_both_launches(fake, rng):
    program = make_program()
    x = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    with CudaModel(program, BINARY) as model:
        result = model(x)
        assert isinstance(result, list)                 # as OpenCLModel: GpuModel unwraps one output
        y, z = result
        want_y, want_z = reference(x, program)
        np.testing.assert_allclose(y, want_y, rtol=1e-6)
        np.testing.assert_allclose(z, want_z, rtol=1e-6)
        assert [name for name, _ in fake.launched] == ["scale", "finish"]
        base = next(iter(fake.memory))
        assert fake.launched[0][1] == [base + 512, base, base + 256]          # staged input, weights, arena
        assert fake.launched[1][1] == [base + 256, base + 32, base + 768, base + 1024]
    assert fake.memory == {}                                                   # closed: freed
    assert fake.calls.count("cuMemAlloc") == 1 and fake.calls.count("cuMemcpyHtoD") == 1    # weights once


def test_repeated_calls_reuse_the_parameters_and_give_fresh_outputs(fake, rng):
    model = CudaModel(make_program(), BINARY)
    a, b = (rng.standard_normal((ROWS, COLS), dtype=np.float32) for _ in range(2))
    ya, _ = model(a)
    yb, _ = model(b)
    assert ya is not yb and not np.shares_memory(ya, yb)
    np.testing.assert_allclose(ya, reference(a, model.program)[0], rtol=1e-6)
    assert fake.launched[0][1] == fake.launched[2][1]
    model.close()


def test_run_returns_a_list_and_writes_out(fake, rng):
    model = CudaModel(make_program(), BINARY)
    x = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    y, z = np.empty((ROWS, COLS), np.float32), np.empty(ROWS, np.float32)
    result = model.run([x], out=[y, z])
    assert result[0] is y and result[1] is z
    np.testing.assert_allclose(z, reference(x, model.program)[1], rtol=1e-6)
    copies = fake.calls.count("cuMemcpyHtoDAsync")
    with pytest.raises(TensorforgeError, match=r"out\[1\]"):
        model.run([x], out=[y, np.empty(ROWS, np.float64)])
    assert fake.calls.count("cuMemcpyHtoDAsync") == copies          # checked before anything was queued


def test_cpu_torch_tensors_in_give_torch_tensors_out(fake):
    torch = pytest.importorskip("torch")
    model = CudaModel(make_program(), BINARY)
    x = torch.randn(ROWS, COLS)
    y, z = model(x)
    assert isinstance(y, torch.Tensor) and isinstance(z, torch.Tensor)
    np.testing.assert_allclose(z.numpy(), reference(x.numpy(), model.program)[1], rtol=1e-6)


def test_bad_inputs_are_named(fake):
    model = CudaModel(make_program(), BINARY)
    with pytest.raises(TensorforgeError, match=r"takes 1 input\(s\) \(input0\), got 2"):
        model(np.zeros((ROWS, COLS), np.float32), np.zeros(1))
    with pytest.raises(TensorforgeError, match=r"input #0 'input0'.*float64.*astype"):
        model(np.zeros((ROWS, COLS)))
    with pytest.raises(InputShapeError, match=r"input #0 'input0'.*\[4, 9\]"):
        model(np.zeros((ROWS, COLS + 1), np.float32))


def test_a_failed_driver_call_names_the_call_and_kernel(monkeypatch):
    driver = FakeDriver(fail="cuLaunchKernel")
    monkeypatch.setattr(cuda_runtime, "_driver", lambda: driver)
    model = CudaModel(make_program(), BINARY)
    with pytest.raises(TensorforgeError, match=r"cuLaunchKernel.*kernel 'scale'.*CUDA_ERROR_INVALID_VALUE: "
                                               r"simulated failure"):
        model(np.zeros((ROWS, COLS), np.float32))
    assert driver.calls[-1] == "cuStreamSynchronize"     # what was queued finished before the error


def test_a_missing_kernel_fails_at_load_and_frees_what_was_taken(fake):
    program = make_program()
    program.launches.append(Launch("absent", (1, 1, 1), (1, 1, 1), ()))
    with pytest.raises(TensorforgeError, match="cuModuleGetFunction for kernel 'absent' failed: CUDA_ERROR_NOT_FOUND"):
        CudaModel(program, BINARY)
    assert "cuModuleUnload" in fake.calls and "cuDevicePrimaryCtxRelease" in fake.calls


def test_a_closed_model_refuses_calls(fake):
    model = CudaModel(make_program(), BINARY)
    model.close()
    model.close()                                       # twice is fine
    with pytest.raises(TensorforgeError, match="closed"):
        model(np.zeros((ROWS, COLS), np.float32))


def test_time_call_gives_the_median_of_event_times(fake):
    model = CudaModel(make_program(), BINARY)
    ms = time_call(model, [np.zeros((ROWS, COLS), np.float32)], warmup=1, repeats=3)
    assert ms == 0.5                                    # the fake's end event is handle 2: 0.25 * 2
    assert fake.calls.count("cuLaunchKernel") == 2 * 4


# ---- on a GPU ---------------------------------------------------------------------------------

needs_gpu = pytest.mark.skipif(not (nvrtc_available() and cuda_device_available()),
                               reason="needs an NVIDIA GPU with its driver and the tensorforge[cuda] wheels")


@pytest.fixture
def gpu_model(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    model = CudaModel.build(make_program())
    yield model
    model.close()


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed (pip install 'tensorforge[cuda]')")
def test_the_gpu_tests_program_compiles_within_the_h200s_limits(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    program = make_program()
    binary = compile_cuda(program.source, GpuTarget.h200().arch)
    assert set(binary.resources) == {"scale", "finish"}
    assert binary.resources["finish"].shared_bytes == program.kernels["finish"].shared_bytes
    threads = {name: info.threads for name, info in program.kernels.items()}
    assert check_resources(binary.resources, GpuTarget.h200(), threads) == []


@needs_gpu
def test_gpu_numpy_in_numpy_out(gpu_model, rng):
    x = rng.standard_normal((ROWS, COLS), dtype=np.float32)
    y, z = gpu_model(x)
    want_y, want_z = reference(x, gpu_model.program)
    np.testing.assert_allclose(y, want_y, rtol=1e-6)
    np.testing.assert_allclose(z, want_z, rtol=1e-5)


@needs_gpu
def test_gpu_torch_cuda_in_torch_cuda_out(gpu_model):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    x = torch.randn(ROWS, COLS, device="cuda")
    y, z = gpu_model(x)
    assert y.device.type == "cuda" and z.device.type == "cuda"
    want_y, want_z = reference(x.cpu().numpy(), gpu_model.program)
    np.testing.assert_allclose(y.cpu().numpy(), want_y, rtol=1e-6)
    np.testing.assert_allclose(z.cpu().numpy(), want_z, rtol=1e-5)
    with pytest.raises(TensorforgeError, match="torch.float64"):
        gpu_model(x.double())


@needs_gpu
def test_gpu_time_call(gpu_model):
    assert time_call(gpu_model, [np.zeros((ROWS, COLS), np.float32)], warmup=2, repeats=5) > 0
