"""The CUDA device compiler: ptxas reports, resource checks, NVRTC compiles, errors and the cache.

NVRTC needs no GPU and no driver; the compile tests skip only where the ``tensorforge[cuda]``
wheels are missing."""
import sys

import pytest

from tensorforge.codegen.cuda import nvrtc
from tensorforge.codegen.cuda.nvrtc import (KernelResources, block_registers, check_resources, compile_cuda,
                                            error_excerpt, failing_kernel, nvrtc_available, parse_ptxas_report)
from tensorforge.codegen.target import GpuTarget
from tensorforge.errors import CompileError, ResourceError, TensorforgeError

# Recorded from NVRTC 13.0 (-Xptxas=-v): a mangled C++ kernel, a spilling kernel, a kernel with a
# __noinline__ callee (whose properties come after the kernel's and are not a kernel), a kernel
# with shared memory and a barrier, and one line in the older format without barriers.
RECORDED_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z7mangledPf' for 'sm_90'
ptxas info    : Function properties for _Z7mangledPf
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
ptxas info    : Compile time = 9.045 ms
ptxas info    : Overriding maximum register limit 256 for 'spill' with  32 of maxrregcount option
ptxas info    : Compiling entry function 'spill' for 'sm_90'
ptxas info    : Function properties for spill
ptxas         .     280 bytes stack frame, 500 bytes spill stores, 500 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 280 bytes cumulative stack size
ptxas info    : Compile time = 33.478 ms
ptxas info    : Compiling entry function 'callr' for 'sm_90'
ptxas info    : Function properties for callr
ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 36 registers, used 0 barriers, 128 bytes cumulative stack size
ptxas info    : Function properties for _Z1ffPf
ptxas         .     64 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Compiling entry function 'k_smem' for 'sm_90'
ptxas info    : Function properties for k_smem
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 14 registers, used 1 barriers, 1024 bytes smem
ptxas info    : Compiling entry function 'old_format' for 'sm_80'
ptxas info    : Function properties for old_format
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, 2048 bytes smem, 368 bytes cmem[0]
"""

SMEM_KERNEL = r"""
extern "C" __global__ void reverse256(const float* __restrict__ a, float* __restrict__ b) {
    __shared__ float tile[256];
    int i = blockIdx.x * 256 + threadIdx.x;
    tile[threadIdx.x] = a[i];
    __syncthreads();
    b[i] = tile[255 - threadIdx.x];
}
"""

TOO_MUCH_SHARED = r"""
extern "C" __global__ void small_one(float* b) { b[threadIdx.x] *= 2.0f; }

extern "C" __global__ void big_tile(float* b) {
    __shared__ float tile[16384];              /* 64 KiB: over the 48 KiB static limit */
    tile[threadIdx.x] = b[threadIdx.x];
    __syncthreads();
    b[threadIdx.x] = tile[threadIdx.x ^ 1];
}
"""

UNDEFINED_NAME = r"""
extern "C" __global__ void fine(float* b) { b[0] = 1.0f; }

extern "C" __global__ void __launch_bounds__(128) broken(float* b) {
    b[threadIdx.x] = undefined_name;
}
"""

SYNTAX_ERROR = UNDEFINED_NAME.replace("undefined_name;", "2.0f")        # no semicolon

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed (pip install 'tensorforge[cuda]')")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


# ---- the ptxas report ------------------------------------------------------------------------

def test_parse_ptxas_report_reads_every_entry():
    report = parse_ptxas_report(RECORDED_LOG)
    assert list(report) == ["_Z7mangledPf", "spill", "callr", "k_smem", "old_format"]
    assert report["_Z7mangledPf"] == KernelResources(registers=8)
    assert report["spill"] == KernelResources(registers=32, spill_stores=500, spill_loads=500, stack_bytes=280)
    assert report["k_smem"] == KernelResources(registers=14, shared_bytes=1024, barriers=1)
    assert report["old_format"] == KernelResources(registers=12, shared_bytes=2048)
    assert report["spill"].spills and not report["k_smem"].spills


def test_a_callees_properties_are_not_its_callers():
    report = parse_ptxas_report(RECORDED_LOG)
    assert "_Z1ffPf" not in report
    assert report["callr"] == KernelResources(registers=36, stack_bytes=128)


def test_parse_ptxas_report_of_a_log_without_kernels():
    assert parse_ptxas_report("") == {}
    assert parse_ptxas_report("model.cu(3): error: expected a \";\"") == {}


# ---- checks against a target ----------------------------------------------------------------

def test_check_resources_is_quiet_for_a_good_kernel():
    good = {"k": KernelResources(registers=32, shared_bytes=16 * 1024, barriers=1)}
    assert check_resources(good, GpuTarget.h200(), {"k": 1024}) == []


def test_check_resources_names_each_problem():
    h200 = GpuTarget.h200()
    report = {
        "spills": KernelResources(registers=32, spill_stores=16, spill_loads=8),
        "fat": KernelResources(registers=128),
        "shared": KernelResources(registers=16, shared_bytes=64 * 1024),
    }
    problems = check_resources(report, h200, {"spills": 128, "fat": 1024, "shared": 256, "absent": 32})
    assert len(problems) == 4, problems
    spills, fat, shared, absent = problems
    assert "'spills'" in spills and "16 bytes stored" in spills and "8 bytes loaded" in spills
    assert "'fat'" in fat and "131072 registers per block" in fat and "65536" in fat
    assert "'shared'" in shared and "65536 bytes of static shared memory" in shared and "49152" in shared
    assert "'absent'" in absent


def test_check_resources_registers_per_thread_and_threads_per_block():
    target = GpuTarget("small GPU", "cuda", max_threads_per_block=256, registers_per_thread=64)
    problems = check_resources({"k": KernelResources(registers=96)}, target, {"k": 512})
    assert any("96 registers per thread" in p for p in problems)
    assert any("512 threads per block" in p for p in problems)


def test_block_registers_rounds_per_warp():
    assert block_registers(64, 1024) == 65536
    assert block_registers(63, 1024) == 65536          # 63 x 32 = 2016 rounds up to 2048 per warp
    assert block_registers(1, 1) == 256                 # one warp, one allocation unit
    assert block_registers(32, 33) == 2 * 1024          # a partial warp takes a whole one


# ---- error messages (pure) ------------------------------------------------------------------

def test_failing_kernel_from_ptxas_and_from_the_front_end():
    ptxas = "ptxas info    : Used 10 registers\nptxas error   : Entry function 'big_tile' uses too much shared data"
    assert failing_kernel(ptxas, "") == "big_tile"
    front = 'model.cu(5): error: identifier "undefined_name" is undefined\n'
    assert failing_kernel(front, UNDEFINED_NAME) == "broken"
    assert failing_kernel('model.cu(1): error: x', "int x = ;\n") is None
    assert failing_kernel("nvrtc: error: invalid value for --gpu-architecture (-arch)", "") is None


def test_error_excerpt_skips_the_info_lines():
    log = "\n".join([f"ptxas info    : line {i}" for i in range(100)] + ["model.cu(3): error: bad", "  src", "  ^"])
    assert error_excerpt(log) == "model.cu(3): error: bad\n  src\n  ^"
    assert error_excerpt("a\nb\nc", limit=2) == "a\nb"


# ---- compiling ------------------------------------------------------------------------------

@needs_nvrtc
def test_compile_reports_registers_shared_memory_and_barriers(cache):
    binary = compile_cuda(SMEM_KERNEL)
    assert binary.cubin.startswith(b"\x7fELF") and binary.arch == "sm_90"
    r = binary.resources["reverse256"]
    assert r.registers > 0
    assert r.shared_bytes == 256 * 4
    assert r.barriers == 1
    assert not r.spills and r.stack_bytes == 0
    assert check_resources(binary.resources, GpuTarget.h200(), {"reverse256": 256}) == []


@needs_nvrtc
def test_too_much_static_shared_memory_is_a_compile_error(cache):
    with pytest.raises(CompileError) as info:
        compile_cuda(TOO_MUCH_SHARED)
    message = str(info.value)
    assert "'big_tile'" in message and "too much shared data" in message and "sm_90" in message
    kept = message.split("source kept at ")[1].split("\n")[0]
    assert open(kept).read() == TOO_MUCH_SHARED


@needs_nvrtc
@pytest.mark.parametrize("source, error", [
    (SYNTAX_ERROR, 'model.cu(6): error: expected a ";"'),           # reported at the next token
    (UNDEFINED_NAME, 'model.cu(5): error: identifier "undefined_name" is undefined\n'
                     '      b[threadIdx.x] = undefined_name;'),      # with the source line NVRTC quotes
])
def test_a_front_end_error_is_a_compile_error_with_the_log(cache, source, error):
    with pytest.raises(CompileError) as info:
        compile_cuda(source)
    message = str(info.value)
    assert "CUDA kernel 'broken'" in message
    assert error in message


@needs_nvrtc
def test_second_compile_hits_the_cache(cache, monkeypatch):
    first = compile_cuda(SMEM_KERNEL)
    assert not first.cache_hit
    monkeypatch.setattr(nvrtc, "_run_nvrtc", lambda *a: pytest.fail("NVRTC ran on a cache hit"))
    second = compile_cuda(SMEM_KERNEL)
    assert second.cache_hit
    assert (second.cubin, second.log, second.resources, second.digest) == \
        (first.cubin, first.log, first.resources, first.digest)
    assert list(cache.rglob("*.cubin")) and not list(cache.rglob("*.tmp"))


@needs_nvrtc
def test_arch_and_options_change_the_key(cache):
    a = compile_cuda(SMEM_KERNEL)
    b = compile_cuda(SMEM_KERNEL, arch="sm_80")
    c = compile_cuda(SMEM_KERNEL, options=["-DUNUSED=1"])
    assert len({a.digest, b.digest, c.digest}) == 3
    assert not (b.cache_hit or c.cache_hit)


@needs_nvrtc
def test_a_damaged_cache_entry_is_compiled_again(cache):
    first = compile_cuda(SMEM_KERNEL)
    (cubin,) = cache.rglob("*.cubin")
    cubin.write_bytes(b"not a cubin")
    again = compile_cuda(SMEM_KERNEL)
    assert not again.cache_hit and again.cubin == first.cubin
    assert cubin.read_bytes() == first.cubin


@needs_nvrtc
def test_cuda_headers_are_on_the_include_path(cache):
    binary = compile_cuda('#include <cuda_fp16.h>\n'
                          'extern "C" __global__ void half_one(__half* h) { h[threadIdx.x] = __float2half(1.0f); }\n')
    assert "half_one" in binary.resources


def test_a_virtual_architecture_is_refused():
    with pytest.raises(TensorforgeError, match="compute_90"):
        nvrtc.compile_options("compute_90")


def test_missing_wheels_say_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)      # makes the import fail
    nvrtc.nvrtc_version.cache_clear()
    try:
        assert not nvrtc_available()
        with pytest.raises(ResourceError, match=r"pip install 'tensorforge\[cuda\]'"):
            compile_cuda(SMEM_KERNEL)
    finally:
        monkeypatch.undo()
        nvrtc.nvrtc_version.cache_clear()
