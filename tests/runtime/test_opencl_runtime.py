"""The OpenCL runtime on a hand-written program that follows the printer's convention (a base and a
byte offset per argument): regions, launches, input checks, build errors, device choice.

Runs wherever an OpenCL device exists (PoCL on the CPU in CI); skipped elsewhere.
"""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

pytest.importorskip("pyopencl")

from tensorforge.codegen.gpu.program import BufferRef, GpuProgram, KernelInfo, Launch  # noqa: E402
from tensorforge.errors import CompileError, TensorforgeError  # noqa: E402
from tensorforge.ir.types import tensor  # noqa: E402
from tensorforge.runtime import opencl  # noqa: E402

pytestmark = pytest.mark.skipif(not opencl.opencl_available(), reason="no OpenCL device (install pocl-opencl-icd)")

SHAPE = (2, 5)
N = 10                   # elements; launches run 16 work-items (2 groups of 8) and guard the rest
W_OFFSET = 64            # where w starts in the weights region (bytes)
T_OFFSET = 128           # where the intermediate starts in the arena (bytes)

SOURCE = f"""
#define N {N}
#define AT(T, base, off) ((__global T*)((base) + (off)))

// t = x * 2 + w    (x: input 0, w: weights, t: arena)
__kernel void scale_add(__global uchar* base0, long off0, __global uchar* base1, long off1,
                        __global uchar* base2, long off2) {{
  size_t i = get_global_id(0);
  if (i < N) AT(float, base2, off2)[i] = AT(const float, base0, off0)[i] * 2.0f + AT(const float, base1, off1)[i];
}}

// y = t + 1        (t: arena, written by the launch before; y: output 0)
__kernel void add_one(__global uchar* base0, long off0, __global uchar* base1, long off1) {{
  size_t i = get_global_id(0);
  if (i < N) AT(float, base1, off1)[i] = AT(const float, base0, off0)[i] + 1.0f;
}}
"""

W = np.arange(N, dtype=np.float32) * 0.25 - 1.0


def weights_blob() -> np.ndarray:
    blob = np.full(W_OFFSET + W.nbytes, 0xAB, dtype=np.uint8)    # junk before w: the offset must count
    blob[W_OFFSET:] = W.view(np.uint8)
    return blob


def make_program(source: str = SOURCE, launches: list[Launch] | None = None, **changes) -> GpuProgram:
    """The two-launch program: y = (x * 2 + w) + 1 through an arena intermediate."""
    if launches is None:
        launches = [
            Launch("scale_add", (2, 1, 1), (8, 1, 1),
                   (BufferRef("input"), BufferRef("weights", W_OFFSET), BufferRef("arena", T_OFFSET))),
            Launch("add_one", (2, 1, 1), (8, 1, 1), (BufferRef("arena", T_OFFSET), BufferRef("output"))),
        ]
    fields = dict(language="opencl", source=source, launches=launches,
                  kernels={k: KernelInfo(k, "", 8, 0) for k in ("scale_add", "add_one")},
                  weights=weights_blob(), arena_bytes=T_OFFSET + N * 4, scratch_bytes=0,
                  input_types=[tensor(SHAPE, "f32")], output_types=[tensor(SHAPE, "f32")])
    fields.update(changes)
    return GpuProgram(**fields)


def reference(x: np.ndarray) -> np.ndarray:
    return (x * np.float32(2) + W.reshape(SHAPE)) + np.float32(1)


@pytest.fixture(scope="module")
def model() -> opencl.OpenCLModel:
    return opencl.OpenCLModel(make_program(), input_names=["x"], output_names=["y"])


def random_input(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(SHAPE).astype(np.float32)


# ---- running ----------------------------------------------------------------------------------
def test_two_launches_through_the_arena_match_numpy_exactly(model):
    x = random_input(0)
    (y,) = model(x)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == SHAPE
    np.testing.assert_array_equal(y, reference(x))


def test_every_call_copies_its_own_inputs_in(model):
    for seed in (1, 2):
        x = random_input(seed)
        np.testing.assert_array_equal(model(x)[0], reference(x))


def test_non_contiguous_and_list_inputs_are_converted(model):
    x = random_input(3)
    np.testing.assert_array_equal(model(np.asfortranarray(x))[0], reference(x))
    np.testing.assert_array_equal(model(x.tolist())[0], reference(x))


def test_torch_in_gives_torch_out(model):
    torch = pytest.importorskip("torch")
    x = random_input(4)
    (y,) = model(torch.from_numpy(x).requires_grad_(True))
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
    np.testing.assert_array_equal(y.numpy(), reference(x))
    with pytest.raises(TensorforgeError, match=r"'x'.*torch.float64.*\.to\(torch.float32\)"):
        model(torch.zeros(SHAPE, dtype=torch.float64))


def test_regions_are_aligned_in_one_allocation(model):
    align = opencl.region_alignment(model.device)
    assert align >= 256
    offsets = [model.regions[r][0] for r in ("weights", "arena", "scratch")]
    assert all(o % align == 0 for o in offsets)
    assert model.regions["arena"][0] >= weights_blob().nbytes


def test_empty_tensors_get_valid_buffers():
    empty = tensor((0, 3), "f32")
    m = opencl.OpenCLModel(make_program(launches=[], input_types=[empty], output_types=[empty],
                                        weights=np.zeros(0, np.uint8), arena_bytes=0))
    (y,) = m(np.zeros((0, 3), np.float32))
    assert y.shape == (0, 3)


def test_time_call_is_a_positive_median(model):
    assert opencl.time_call(model, [random_input(5)], warmup=1, repeats=3) > 0


# ---- input checks -----------------------------------------------------------------------------
@pytest.mark.parametrize("args, pattern", [
    ((), r"takes 1 input\(s\) \(x\), got 0"),
    ((np.zeros(SHAPE, np.float32),) * 2, r"takes 1 input\(s\) \(x\), got 2"),
    ((np.zeros((5, 2), np.float32),), r"input #0 'x'.*got shape \[5, 2\].*\[2, 5\]"),
    ((np.zeros(SHAPE, np.float64),), r"input #0 'x'.*got dtype float64.*astype\(np.float32\)"),
    ((object(),), r"input #0 'x'.*cannot convert"),
])
def test_bad_inputs_name_the_input(model, args, pattern):
    with pytest.raises(TensorforgeError, match=pattern):
        model(*args)


# ---- programs that cannot run -------------------------------------------------------------------
def test_a_syntax_error_is_a_compile_error_with_the_build_log():
    broken = SOURCE.replace("+ 1.0f;", "+ 1.0f")
    with pytest.raises(CompileError) as info:
        opencl.OpenCLModel(make_program(source=broken))
    message = str(info.value)
    assert "failed to build" in message and "scale_add, add_one" in message
    assert "<source>:" in message and "error" in message.lower()


def test_programs_are_built_once_per_source_and_device(model):
    assert opencl.build_program(SOURCE, model.device) == (model.context, model.cl_program)


def test_launch_problems_are_named():
    bad_name = [Launch("nope", (1, 1, 1), (1, 1, 1), (BufferRef("input"), BufferRef("output")))]
    with pytest.raises(CompileError, match=r"launch #0 runs kernel 'nope'.*defines: .*scale_add"):
        opencl.OpenCLModel(make_program(launches=bad_name))
    too_few = [Launch("add_one", (1, 1, 1), (1, 1, 1), (BufferRef("output"),))]
    with pytest.raises(CompileError, match=r"'add_one' takes 4 parameters.*passes 1 buffer"):
        opencl.OpenCLModel(make_program(launches=too_few))
    outside = [Launch("add_one", (1, 1, 1), (1, 1, 1), (BufferRef("arena", 10_000), BufferRef("output")))]
    with pytest.raises(TensorforgeError, match=r"offset 10000 is outside the arena"):
        opencl.OpenCLModel(make_program(launches=outside))
    no_input = [Launch("add_one", (1, 1, 1), (1, 1, 1), (BufferRef("input", 0, 3), BufferRef("output")))]
    with pytest.raises(TensorforgeError, match=r"input #3 does not exist"):
        opencl.OpenCLModel(make_program(launches=no_input))


def test_a_work_group_the_device_cannot_run_is_refused(model):
    limit = opencl.device_limits(model.device)["max_work_group_size"]
    huge = [Launch("add_one", (1, 1, 1), (limit + 1, 1, 1), (BufferRef("arena"), BufferRef("output")))]
    with pytest.raises(TensorforgeError, match="does not fit"):
        opencl.OpenCLModel(make_program(launches=huge))


def test_only_opencl_programs_are_accepted():
    with pytest.raises(TensorforgeError, match="'cuda'"):
        opencl.OpenCLModel(make_program(language="cuda"))


# ---- devices -----------------------------------------------------------------------------------
def test_device_limits_size_a_target(model):
    limits = opencl.device_limits(model.device)
    assert limits["name"] and limits["max_work_group_size"] >= 1 and limits["local_mem_size"] > 0


def test_the_environment_picks_the_device(monkeypatch, model):
    monkeypatch.setenv(opencl.ENV_DEVICE, model.device.platform.name[:6].upper())
    assert opencl.default_device() == model.device
    monkeypatch.setenv(opencl.ENV_DEVICE, "no-such-device-xyz")
    with pytest.raises(TensorforgeError, match=r"no OpenCL device matches 'no-such-device-xyz'.*devices are: '"):
        opencl.default_device()


def test_no_platform_says_what_to_install(monkeypatch):
    monkeypatch.setattr(opencl, "_devices", lambda: [])
    assert not opencl.opencl_available()
    with pytest.raises(TensorforgeError, match=r"pocl-opencl-icd.*tensorforge\[opencl\]"):
        opencl.default_device()


# ---- a child process for kernels that may crash the driver ---------------------------------------
def test_run_isolated_returns_what_the_model_returns(model):
    x = random_input(6)
    (y,) = opencl.run_isolated(make_program(), [x], device=model.device)
    np.testing.assert_array_equal(y, reference(x))


def test_run_isolated_raises_the_childs_errors_here(model):
    with pytest.raises(CompileError, match="failed to build"):
        opencl.run_isolated(make_program(source="__kernel void f() { oops }"), [random_input(7)],
                            device=model.device)


BARRIER_IN_BRANCH = """__kernel void add_one(__global uchar* base0, long off0, __global uchar* base1, long off1) {
  __local float s[8];
  size_t i = get_local_id(0);
  if (i < 3) { s[i] = 1.0f; barrier(CLK_LOCAL_MEM_FENCE); }
  ((__global float*)(base1 + off1))[i] = s[0];
}"""


def test_run_isolated_survives_a_kernel_that_hangs_or_crashes_the_driver(model):
    """Illegal on every device; PoCL hangs or aborts on it, which only the child sees."""
    launch = Launch("add_one", (1, 1, 1), (8, 1, 1), (BufferRef("arena"), BufferRef("output")))
    program = make_program(source=BARRIER_IN_BRANCH, launches=[launch])
    with pytest.raises(TensorforgeError, match="child process running the OpenCL program"):
        opencl.run_isolated(program, [random_input(8)], device=model.device, timeout=1.5)
    assert not multiprocessing.active_children()
