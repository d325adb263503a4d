"""How OpenCL C spells a GPU kernel (docs/gpu.md): ``__kernel`` functions with a required
work-group size, buffers as a ``__global uchar*`` base plus a byte offset (the runtime passes one
device allocation and offsets into it), ``get_group_id``/``get_local_id``, ``__local`` arrays and
``barrier``.  OpenCL's math functions are overloaded, so the C library's float names map onto them."""
from __future__ import annotations

from ..gpu.language import COMMON, Language

PRELUDE = r"""#pragma OPENCL FP_CONTRACT OFF
typedef long int64_t; typedef int int32_t; typedef short int16_t; typedef char int8_t;
typedef ulong uint64_t; typedef uint uint32_t; typedef ushort uint16_t; typedef uchar uint8_t;
#define INT64_C(x) ((int64_t)(x))
#define UINT32_C(x) ((uint32_t)(x))
#define UINT64_C(x) ((uint64_t)(x))
#define INT64_MIN LONG_MIN
#define TF_FN static inline
#define TF_AS_UINT(f) as_uint(f)
#define TF_AS_FLOAT(u) as_float(u)
#define expf exp
#define expm1f expm1
#define logf log
#define log1pf log1p
#define sqrtf sqrt
#define tanhf tanh
#define erff erf
#define sinf sin
#define cosf cos
#define asinf asin
#define acosf acos
#define atanf atan
#define floorf floor
#define ceilf ceil
#define fabsf fabs
#define fmodf fmod
#define powf pow
#define nearbyintf rint
""" + COMMON


OPENCL = Language(
    "opencl", PRELUDE,
    kernel="__kernel __attribute__((reqd_work_group_size({bx}, {by}, {bz}))) void {name}({params})",
    param="__global uchar* b{k}, long o{k}",
    param_setup="__global {const}{type}* {restrict}{name} = (__global {const}{type}*)(b{k} + o{k});",
    restrict="restrict ",
    block_index="get_group_id({axis})", thread_index="get_local_id({axis})",
    shared="__local ", barrier="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    vector_load="vload{n}(0, {ptr})", vector_store="vstore{n}({value}, 0, {ptr});",
    vector_value="(float{n})({lanes})", components=(".s0", ".s1", ".s2", ".s3"))
