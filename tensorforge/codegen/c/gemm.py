"""A generated GEMM compiled and callable from NumPy.

Tests, the benchmark and the auto-tuner run generated kernels through this wrapper; the model
compiler calls the same C entry points from its generated model code instead.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ...errors import ShapeError
from ..target import Target
from .microkernels import GemmParams, GemmSpec, generate_gemm, pack_b, packed_b_size, signatures
from .toolchain import CompiledLibrary, compile_c

_CTYPES = {"long": ctypes.c_long, "int": ctypes.c_int}


def _ctype(decl: str):
    return ctypes.c_void_p if "*" in decl or decl.startswith("tf_epi_fn") else _CTYPES[decl.split()[0]]


def _ptr(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


def _matrix(x, what: str) -> np.ndarray:
    """A C-contiguous float32 2-D view (copying only when the caller's array is not one)."""
    arr = np.ascontiguousarray(x, dtype=np.float32)
    if arr.ndim != 2:
        raise ShapeError(f"gemm operand {what} must be 2-D, got shape {arr.shape}")
    return arr


class GemmKernel:
    """``C = epilogues(A @ B (+ C))`` through a generated and cached C library."""

    def __init__(self, params: GemmParams | None = None, target: Target | None = None,
                 spec: GemmSpec = GemmSpec(), name: str = "tf_gemm"):
        self.target = target or Target.host()
        self.params = params or GemmParams.for_target(self.target)
        self.spec, self.name = spec, name
        self.source = generate_gemm(self.params, self.target, spec, name)
        self.library: CompiledLibrary = compile_c(self.source, self.target, name=name)
        sigs = signatures(spec, name)
        self._full = self.library.function(name, [_ctype(d) for d in sigs[name]])
        self._prepacked = self.library.function(f"{name}_prepacked", [_ctype(d) for d in sigs[f"{name}_prepacked"]])
        self._pack_b = self.library.function(f"{name}_pack_b", [_ctype(d) for d in sigs[f"{name}_pack_b"]])

    # -- operand handling ---------------------------------------------------------------------

    def _dims(self, A: np.ndarray, K_b: int, N: int) -> tuple[int, int, int]:
        M, K = (A.shape[1], A.shape[0]) if self.spec.trans_a else A.shape
        if K != K_b:
            raise ShapeError(f"gemm {self.name}: A has K={K} but B has K={K_b}")
        return M, N, K

    def _output(self, C: np.ndarray | None, M: int, N: int, accumulate: bool) -> np.ndarray:
        """C as the kernel writes it: [M, N], or [N, M] for a transposed C (``GemmSpec.trans_c``)."""
        if self.spec.trans_c:
            M, N = N, M
        if C is None:
            if accumulate:
                raise ShapeError(f"gemm {self.name}: accumulate=True needs an output array C")
            return np.empty((M, N), dtype=np.float32)
        if C.shape != (M, N) or C.dtype != np.float32 or not C.flags.c_contiguous:
            raise ShapeError(f"gemm {self.name}: C must be a C-contiguous float32 array of shape {(M, N)}, "
                             f"got {C.dtype} {C.shape}")
        return C

    def _epilogue_args(self, M: int, N: int, kwargs: dict) -> tuple[list, list]:
        """ctypes values for the epilogue parameters, plus the arrays to keep alive during the call.
        An index parameter ``ld_X`` defaults to the row length of array ``X``. A callback spec takes
        ``epi`` (the address of a C ``tf_epi_fn``, or None) and ``epi_ctx`` (an address passed to it)."""
        if self.spec.callback:
            unknown = set(kwargs) - {"epi", "epi_ctx"}
            if unknown:
                raise ShapeError(f"gemm {self.name}: unexpected epilogue arguments {sorted(unknown)}")
            return [kwargs.get("epi"), kwargs.get("epi_ctx")], []
        unknown = set(kwargs) - {p.name for p in self.spec.params}
        if unknown:
            raise ShapeError(f"gemm {self.name}: unexpected epilogue arguments {sorted(unknown)}")
        values, arrays = [], {}
        for p in self.spec.params:
            if p.kind == "ptr":
                if p.name not in kwargs:
                    raise ShapeError(f"gemm {self.name}: epilogue argument {p.name!r} missing")
                arr = arrays[p.name] = np.ascontiguousarray(kwargs[p.name], dtype=np.float32)
                want = {"col": (N,), "row": (M,), "tile": (M, N)}[p.extent]
                if arr.shape != want:
                    raise ShapeError(f"gemm {self.name}: epilogue argument {p.name!r} has shape {arr.shape}, "
                                     f"needs {want}")
                values.append(_ptr(arr))
            else:   # ld_X: the row length of the contiguous tile array X
                ref = arrays.get(p.name.removeprefix("ld_"))
                values.append(int(kwargs.get(p.name, ref.shape[-1] if ref is not None else N)))
        return values, list(arrays.values())

    # -- calls ----------------------------------------------------------------------------------

    def __call__(self, A, B, C: np.ndarray | None = None, accumulate: bool = False,
                 workspace: np.ndarray | None = None, **epilogue_args) -> np.ndarray:
        """GEMM with B packed on the fly (B is [K, N], or [N, K] when the spec says trans_b).
        ``workspace`` (float32, at least ``packed_b_size`` values) is reused for the packed B;
        without one the kernel allocates and frees it in every call."""
        A, B = _matrix(A, "A"), _matrix(B, "B")
        K_b, N = (B.shape[1], B.shape[0]) if self.spec.trans_b else B.shape
        M, N, K = self._dims(A, K_b, N)
        C = self._output(C, M, N, accumulate)
        if workspace is not None and (workspace.dtype != np.float32 or not workspace.flags.c_contiguous
                                      or workspace.size < packed_b_size(K, N, self.params.nr)):
            raise ShapeError(f"gemm {self.name}: workspace must be a contiguous float32 array of at least "
                             f"{packed_b_size(K, N, self.params.nr)} values")
        extra, keep = self._epilogue_args(M, N, epilogue_args)
        self._full(M, N, K, _ptr(A), A.shape[1], _ptr(B), B.shape[1], _ptr(C), C.shape[1], int(accumulate), *extra,
                   _ptr(workspace))
        del keep
        return C

    def pack_b(self, B) -> np.ndarray:
        """B packed for ``prepacked`` (NumPy, the same layout the C packer writes)."""
        return pack_b(B, self.params.nr, trans=self.spec.trans_b)

    def pack_b_native(self, B) -> np.ndarray:
        """B packed by the generated C routine (for checking that both packers agree)."""
        B = _matrix(B, "B")
        K, N = (B.shape[1], B.shape[0]) if self.spec.trans_b else B.shape
        out = np.zeros((-(-N // self.params.nr), K, self.params.nr), dtype=np.float32)
        self._pack_b(N, K, _ptr(B), B.shape[1], _ptr(out))
        return out

    def prepacked(self, A, Bp: np.ndarray, N: int, C: np.ndarray | None = None, accumulate: bool = False,
                  **epilogue_args) -> np.ndarray:
        """GEMM with B already packed by ``pack_b``; N is B's real column count."""
        A = _matrix(A, "A")
        nr = self.params.nr
        if Bp.dtype != np.float32 or Bp.ndim != 3 or Bp.shape[2] != nr or Bp.shape[0] != -(-N // nr) \
                or not Bp.flags.c_contiguous:
            raise ShapeError(f"gemm {self.name}: packed B must be float32 [{-(-N // nr)}, K, {nr}], got {Bp.dtype} {Bp.shape}")
        M, N, K = self._dims(A, Bp.shape[1], N)
        C = self._output(C, M, N, accumulate)
        extra, keep = self._epilogue_args(M, N, epilogue_args)
        self._prepacked(M, N, K, _ptr(A), A.shape[1], _ptr(Bp), _ptr(C), C.shape[1], int(accumulate), *extra)
        del keep
        return C
