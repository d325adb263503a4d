"""Where onnxruntime's integer sums are exact, so that the int8 tests may compare with it exactly.

On x86 without VNNI (AVX2 hosts such as AMD Zen 3, AVX-512 ones without VNNI), onnxruntime's
(MLAS) kernel for uint8 activations times int8 weights multiplies with ``vpmaddubsw``, which adds
each pair of adjacent u8 x s8 products into an int16 *with saturation*: a pair can reach
255 * 127 * 2 = 64770, is clipped to 32767, and the int32 sum is off by thousands (onnxruntime's
quantization docs name this and recommend ``reduce_range``, 7-bit weights, on such hosts).  With
VNNI (``vpdpbusd``) or AMX the products go straight into int32: exact, as tensorforge's kernels
are on every host.  int8 activations take onnxruntime's s8 x s8 kernel, which is exact on AVX2
too (measured: full-range int8 x int8 MatMulInteger on a Zen 3).

So the tests compare with an exact reference (NumPy) on every host and with onnxruntime exactly
where these rules say its sums are exact, or draw weights of at most ``SATURATION_FREE`` in
magnitude where agreement with onnxruntime's rounding is their point.
"""
import functools
from pathlib import Path

import numpy as np

# CPU flags with which onnxruntime's u8 x s8 kernels have no int16 step
EXACT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
# weights of at most this magnitude keep every pair sum (255 * 64 * 2 = 32640) within int16
SATURATION_FREE = 64


@functools.cache
def _vnni_host() -> bool:
    """Whether this CPU has one of ``EXACT_FLAGS`` (its own flags: onnxruntime does not read
    ``TENSORFORGE_CPU_FEATURES_OFF``); False where /proc/cpuinfo is missing."""
    from tensorforge.codegen.target import parse_cpuinfo_flags
    try:
        return bool(EXACT_FLAGS & parse_cpuinfo_flags(Path("/proc/cpuinfo").read_text()))
    except OSError:
        return False


def exact_in_onnxruntime(activations, weights) -> bool:
    """Whether onnxruntime sums products of ``activations`` (a dtype) and the int8 ``weights``
    exactly on this host."""
    return (np.dtype(activations) == np.int8 or _vnni_host()
            or int(np.abs(np.asarray(weights, np.int64)).max(initial=0)) <= SATURATION_FREE)


def saturation_free_weights(rng: np.random.Generator, shape) -> np.ndarray:
    """Random int8 weights in [-SATURATION_FREE, SATURATION_FREE]: onnxruntime's sums of them are
    exact on every host."""
    return rng.integers(-SATURATION_FREE, SATURATION_FREE + 1, shape).astype(np.int8)
