"""Resource-aware fusion on GPU targets (``passes/fusion/gpu_resources.py``): every candidate merge
that passes the other checks is compiled by NVRTC, and ptxas's registers, spills and shared memory
decide whether it fits.  A target with a tiny register file makes the vetoes happen on a small
model; the H200 lets an ordinary chain through."""
from __future__ import annotations

import dataclasses
import re

import pytest

from tensorforge.codegen.cuda.nvrtc import nvrtc_available
from tensorforge.codegen.target import GpuTarget, Target
from tensorforge.errors import CompileError
from tests.passes.test_fusion import graph_module
from tensorforge.passes.fusion import FusionLog, fuse_function
from tensorforge.passes.fusion import gpu_resources
from tensorforge.passes.fusion.analysis import kernels_of
from tensorforge.passes.fusion.gpu_resources import gpu_resource_oracle, may_press_registers
from tensorforge.passes.lower.graph_to_kernels import lower_function

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC missing (pip install 'tensorforge[cuda]')")

# The GEMMs below take 14 to 62 registers x 64 to 256 threads per block: far below the H200's 65536
# per SM, above 4096.
TINY = dataclasses.replace(GpuTarget.h200(), registers_per_sm=4096)


def elementwise_chain():
    return graph_module([(64, 256), (64, 256)], lambda g, x, y: g.tanh(g.add(g.mul(g.exp(x), y), x)))


def mlp():
    """Linear + ReLU + Linear, big enough for the tiled GEMM schedule."""
    return graph_module([(128, 256), (256, 256), (256, 128)],
                        lambda g, x, w1, w2: g.matmul(g.relu(g.matmul(x, w1)), w2))


def test_no_oracle_off_the_gpu():
    assert gpu_resource_oracle(None) is None
    assert gpu_resource_oracle(Target.host()) is None


def test_small_elementwise_chain_fits_the_h200(monkeypatch):
    m = elementwise_chain()
    log = fuse_function(m.main, GpuTarget.h200(), "fuse", FusionLog())
    (k,) = kernels_of(m.main)
    assert not may_press_registers(k)              # too small to be compiled during fusion
    assert not any("GPU resources" in d.reason for d in log.rejected)
    monkeypatch.setattr(gpu_resources, "SKIP_BELOW_OPS", 0)
    source, threads = gpu_resources.cuda_source(k, GpuTarget.h200())
    assert set(threads) <= set(gpu_resources.ptxas_report(source, "sm_90"))
    assert gpu_resource_oracle(GpuTarget.h200())(k) is None


def test_tiny_register_file_vetoes_the_gemm_epilogue_with_ptxas_numbers():
    m = mlp()
    log = fuse_function(m.main, TINY, "fuse", FusionLog())
    vetoes = [d for d in log.rejected if d.reason.startswith("GPU resources (ptxas sm_90)")]
    assert vetoes, log.dump()
    assert re.search(r"k_\d+ uses \d+ registers x \d+ threads > 4096 per SM", vetoes[0].reason), vetoes[0].reason
    assert lower_function(mlp().main, TINY) > lower_function(mlp().main, GpuTarget.h200())


def test_switched_off_by_the_pass_option():
    log = fuse_function(mlp().main, TINY, "fuse{gpu-resources=false}", FusionLog())
    assert not any("GPU resources" in d.reason for d in log.rejected)


def test_explain_fusion_for_cuda_shows_the_veto(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import tensorforge.codegen.gpu.backend as backend
    from tensorforge.cli import main
    monkeypatch.setattr(backend, "gpu_target", lambda language: TINY)
    out = tmp_path / "mlp.dot"
    assert main(["explain", "mlp_small", "--fusion", "--target", "cuda", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "fusion    fuse for cuda" in text
    line = next(ln for ln in text.splitlines() if "GPU resources (ptxas sm_90)" in ln)
    assert "rejected" in line and "registers x" in line and "> 4096 per SM" in line


def test_a_kernel_ptxas_refuses_is_vetoed_with_the_error(monkeypatch):
    def refuse(source, arch, options=()):
        raise CompileError(f"NVRTC could not compile CUDA kernel 'k_0' for {arch} (NVRTC_ERROR_COMPILATION)\n"
                           f"ptxas error   : Entry function 'k_0' uses too much shared data")
    monkeypatch.setattr(gpu_resources, "compile_cuda", refuse)
    monkeypatch.setattr(gpu_resources, "_VERDICTS", {})
    monkeypatch.setattr(gpu_resources, "_RESOURCES", {})
    log = fuse_function(mlp().main, GpuTarget.h200(), "fuse", FusionLog())
    reasons = [d.reason for d in log.rejected if d.reason.startswith("GPU resources")]
    assert reasons and "could not compile CUDA kernel 'k_0' for sm_90" in reasons[0]
    # OpenCL builds are not judged by ptxas: nothing is vetoed there.
    log = fuse_function(mlp().main, GpuTarget.opencl_default(), "fuse", FusionLog())
    assert not any(d.reason.startswith("GPU resources") for d in log.rejected)
