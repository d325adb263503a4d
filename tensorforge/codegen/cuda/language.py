"""How CUDA C spells a GPU kernel (docs/gpu.md): ``extern "C" __global__`` functions with launch
bounds, typed ``__restrict__`` pointers, ``blockIdx``/``threadIdx``, ``__shared__`` arrays and
``__syncthreads``.  NVRTC has no C library headers, so the prelude declares the fixed-width types
and the float constants itself."""
from __future__ import annotations

from ..gpu.language import COMMON, Language

# NVRTC options of every CUDA build: IEEE arithmetic (no multiply-add contraction), as the C
# backend and OpenCL (FP_CONTRACT OFF) compute.  The tuner and the fusion veto check cubins built
# with these, so what they measure is what runs.
COMPILE_OPTIONS = ("--fmad=false",)

PRELUDE = r"""typedef long long int64_t; typedef int int32_t; typedef short int16_t; typedef signed char int8_t;
typedef unsigned long long uint64_t; typedef unsigned int uint32_t; typedef unsigned short uint16_t;
typedef unsigned char uint8_t;
#define INT64_C(x) ((int64_t)(x##LL))
#define UINT32_C(x) ((uint32_t)(x##U))
#define UINT64_C(x) ((uint64_t)(x##ULL))
#define INT64_MIN (-INT64_C(9223372036854775807) - 1)
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define TF_FN static __device__ __forceinline__
#define TF_AS_UINT(f) __float_as_uint(f)
#define TF_AS_FLOAT(u) __uint_as_float(u)
""" + COMMON


CUDA = Language(
    "cuda", PRELUDE,
    kernel='extern "C" __global__ void __launch_bounds__({threads}, 1) {name}({params})',
    param="{const}{type}* {restrict}{name}", param_setup="", restrict="__restrict__ ",
    block_index="blockIdx.{axis_name}", thread_index="threadIdx.{axis_name}",
    shared="__shared__ ", barrier="__syncthreads();",
    vector_load="(*(const float{n}*)({ptr}))", vector_store="*(float{n}*)({ptr}) = {value};",
    vector_value="make_float{n}({lanes})", components=(".x", ".y", ".z", ".w"))
