"""The C backend: a cached compiler driver and generators of C kernels (GEMM micro-kernels)."""
from .epilogues import Epilogue, EpilogueParam, bias_add, relu, residual_add
from .gemm import GemmKernel
from .microkernels import GemmParams, GemmSpec, generate_gemm, pack_b, packed_b_size, signatures
from .toolchain import CompiledLibrary, cache_dir, compile_c, stats

__all__ = ["CompiledLibrary", "Epilogue", "EpilogueParam", "GemmKernel", "GemmParams", "GemmSpec", "bias_add",
           "cache_dir", "compile_c", "generate_gemm", "pack_b", "packed_b_size", "relu", "residual_add",
           "signatures", "stats"]
