"""What the GPU printer needs to know about a language: ``Language`` holds the spellings that
differ between OpenCL C and CUDA C (the backends' token tables, ``codegen/opencl/language.py`` and
``codegen/cuda/language.py``); ``COMMON`` holds the helpers both preludes share, written once on
top of each language's bit-reinterpretation macros."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    """How one GPU language spells what differs from C."""

    name: str
    prelude: str
    kernel: str             # "{name}" and "{params}" and "{threads}"
    param: str              # one buffer parameter: "{const}", "{restrict}", "{type}", "{name}", "{k}"
    param_setup: str        # statement turning the parameter into the typed pointer (or "")
    restrict: str           # the no-alias qualifier, with its trailing space
    block_index: str        # "{axis}" is 0/1/2
    thread_index: str
    shared: str             # declaration prefix of a shared array
    barrier: str
    vector_load: str = ""   # "{n}" lanes from "{ptr}" (a float pointer expression) -> a float{n} value
    vector_store: str = ""  # "{value}" (a float{n}) to "{ptr}"
    vector_value: str = ""  # a float{n} from "{lanes}" (comma-separated floats)
    components: tuple[str, ...] = ()   # lane k of a float{n} value: the suffix components[k]


# Helpers written once, on top of each language's bit-reinterpretation macros.
COMMON = r"""
TF_FN int64_t tf_floordiv(int64_t a, int64_t b) { int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TF_FN int64_t tf_imod(int64_t a, int64_t b) { int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TF_FN int32_t tf_floordiv32(int32_t a, int32_t b) { int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
TF_FN int32_t tf_imod32(int32_t a, int32_t b) { int32_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }
TF_FN float tf_bf16_load(uint16_t h) { return TF_AS_FLOAT((uint32_t)h << 16); }
TF_FN uint16_t tf_bf16_bits(float f) { uint32_t u = TF_AS_UINT(f); return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
TF_FN float tf_bf16_round(float f) { return tf_bf16_load(tf_bf16_bits(f)); }
TF_FN int tf_isnan_f32(float x) { return (TF_AS_UINT(x) & 0x7fffffffu) > 0x7f800000u; }
TF_FN int64_t tf_key_f32(float x) { uint32_t u = TF_AS_UINT(x); return (u >> 31) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u; }
"""


def languages() -> dict[str, Language]:
    """Every GPU language by name (the backends register here)."""
    from ..cuda.language import CUDA
    from ..opencl.language import OPENCL
    return {"opencl": OPENCL, "cuda": CUDA}
