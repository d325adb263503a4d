"""What a CPU target offers to generated code.

Kernel generators read the vector width, register count and cache sizes from here to pick tile
and block sizes; the toolchain reads the compiler and its flags. ``Target.host()`` detects the
machine this process runs on; a cross compile builds ``Target(march=..., ...)`` by hand, and the
features it leaves out are asked of the compiler (its predefined macros for that ``-march``).

``key()`` names a target in caches and in the tuning database: two targets with the same key must
produce the same code and the same timings, so it covers the ISA, compiler, cores and caches.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CompileError

# IEEE-faithful by default (docs/numerics.md): NaN and infinities propagate as in PyTorch/ONNX and
# -0.0 keeps its sign.  -fno-math-errno lets libm calls vectorize and sqrt become one instruction,
# -fno-trapping-math lets gcc if-convert and vectorize loops with compares; neither changes a
# result.  Reductions still vectorize through OpenMP's ``simd reduction`` clauses, which license
# the reassociation.  -fno-tree-loop-distribute-patterns: gcc otherwise turns row copies into
# memcpy calls, measured 40% slower on 2 KB rows inside our kernels.
DEFAULT_CFLAGS: tuple[str, ...] = ("-O3", "-fno-math-errno", "-fno-trapping-math",
                                   "-fno-tree-loop-distribute-patterns", "-fopenmp", "-fPIC", "-shared")
DEFAULT_LDFLAGS: tuple[str, ...] = ("-lm",)
_MATH_MODE_FLAGS = frozenset({"-ffast-math", "-Ofast", "-fno-math-errno", "-fno-trapping-math"})

# Feature names follow /proc/cpuinfo; the macros are what GCC/Clang predefine when they may use one.
_FEATURE_MACROS: dict[str, str] = {
    "sse2": "__SSE2__",
    "sse4_1": "__SSE4_1__",
    "sse4_2": "__SSE4_2__",
    "avx": "__AVX__",
    "avx2": "__AVX2__",
    "fma": "__FMA__",
    "f16c": "__F16C__",
    "avx512f": "__AVX512F__",
    "avx512bw": "__AVX512BW__",
    "avx512dq": "__AVX512DQ__",
    "avx512vl": "__AVX512VL__",
    "avx512_vnni": "__AVX512VNNI__",
    "avx512_bf16": "__AVX512BF16__",
    "amx_tile": "__AMX_TILE__",
    "amx_int8": "__AMX_INT8__",
    "amx_bf16": "__AMX_BF16__",
    "neon": "__ARM_NEON",
    "sve": "__ARM_FEATURE_SVE",
}
KNOWN_FEATURES = frozenset(_FEATURE_MACROS)

_FALLBACK_CACHES = {"l1d": 32 * 1024, "l2": 1024 * 1024, "l3": 8 * 1024 * 1024}


def vector_shape(arch: str, features: frozenset[str]) -> tuple[int, int]:
    """(fp32 lanes per vector register, number of vector registers) for the widest usable ISA."""
    if "avx512f" in features:
        return 16, 32
    if "avx2" in features or "avx" in features:
        return 8, 16
    if arch in ("aarch64", "arm64"):
        return 4, 32
    return 4, 16


def parse_cpuinfo_flags(text: str) -> frozenset[str]:
    """The ISA flags of the first CPU in a /proc/cpuinfo text (``flags`` on x86, ``Features`` on ARM)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            flags = set(value.split())
            if "asimd" in flags:  # ARM calls NEON "asimd"
                flags.add("neon")
            return frozenset(flags)
    return frozenset()


def parse_cache_size(text: str) -> int:
    """Bytes from a sysfs cache size such as ``32K`` or ``1M``."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" else text
    return int(digits) * scale


def read_cache_sizes(cpu_dir: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """L1 data, L2 and L3 sizes in bytes of one core's view; missing levels keep a typical size."""
    sizes = dict(_FALLBACK_CACHES)
    for index in sorted(cpu_dir.glob("index*")):
        try:
            level = int((index / "level").read_text())
            kind = (index / "type").read_text().strip()
            size = parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        sizes[{1: "l1d", 2: "l2", 3: "l3"}.get(level, f"l{level}")] = size
    return sizes


def vector_width_flags(features: frozenset[str] | None) -> tuple[str, ...]:
    """Flags that let the compiler's auto-vectorizer use the full width the target has.  gcc's
    tuning for Intel cores with AVX-512 (``-march=native`` on Sapphire Rapids and its kin) keeps
    loops at 256 bits (``prefer-vector-width=256``); the generated loop kernels are mostly
    throughput-bound elementwise and reduction loops.  Measured in one process, interleaved, against
    the same builds at 256 bits: MobileNetV2 float32 b1 1.006x, b8 1.004x, BERT-base float32 b1
    1.005x, int8 b8 1.005x, ResNet-50 float32 b1 1.000x (the hand-written kernels pick their width
    themselves; this only moves what gcc vectorizes).  An earlier note credited this flag with
    1.06-1.12x: it was in the cache key but not on the compiler's command line, so those were
    noise; ``toolchain.compile_command`` passes it since.  gcc and clang both accept it."""
    return ("-mprefer-vector-width=512",) if features and "avx512f" in features else ()


def features_turned_off() -> frozenset[str]:
    """CPU features the user keeps generated code from using on this host:
    ``TENSORFORGE_CPU_FEATURES_OFF="amx_int8,amx_bf16"`` builds the AVX-512 kernels instead of the
    AMX ones (to compare the two, or to work around a machine that misbehaves).  The features
    are part of the target key, so such builds are cached and tuned apart."""
    return frozenset(f.strip() for f in os.environ.get("TENSORFORGE_CPU_FEATURES_OFF", "").split(",") if f.strip())


def default_compiler() -> str:
    """$CC if set, else gcc, else cc: the C compiler generated code is built with."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or "cc"


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    """First line of ``cc --version``; part of every cache key so a compiler upgrade rebuilds."""
    try:
        out = subprocess.run([*shlex.split(cc), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"C compiler {cc!r} cannot run ({exc}); install gcc or set $CC") from exc
    if out.returncode != 0:
        raise CompileError(f"C compiler {cc!r} failed on --version: {out.stderr.strip()[:200]}; set $CC")
    return out.stdout.splitlines()[0].strip() if out.stdout else cc


@functools.lru_cache(maxsize=None)
def workaround_flags(cc: str, march: str) -> tuple[str, ...]:
    """Flags that keep a known-bad compiler from miscompiling.  gcc 12 tuning for AMD Zen
    (``-march=native`` on a Zen CPU implies ``-mtune=znver*``) vectorises some guarded loops
    wrongly at -O3: a padded read ``(i >= 0 && i < n) ? x[i] : c`` gave 0 for elements inside the
    input (fuzzer regression test_fuzz_pad_bounds_and.py), and a NaN-safe compare feeding a select
    (test_fuzz_183a6bbe65.py); the same ISA with ``-mtune=generic`` is right.  Empty elsewhere."""
    try:
        version = subprocess.run([*shlex.split(cc), "-dumpversion"], capture_output=True, text=True, timeout=60)
        major = int(version.stdout.strip().split(".")[0])
        if "clang" in compiler_version(cc).lower() or major >= 13:
            return ()
        out = subprocess.run([*shlex.split(cc), f"-march={march}", "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=60)
    except (OSError, ValueError, subprocess.TimeoutExpired, CompileError):
        return ()
    tune = next((line.split()[-1] for line in out.stdout.splitlines() if line.strip().startswith("-mtune=")
                 and len(line.split()) > 1), "")
    return ("-mtune=generic",) if tune.startswith("znver") else ()


@functools.lru_cache(maxsize=None)
def compiler_features(cc: str, march: str) -> frozenset[str]:
    """The features ``cc -march=<march>`` enables, read from its predefined macros."""
    cmd = [*shlex.split(cc), f"-march={march}", "-dM", "-E", "-x", "c", "-"]
    try:
        out = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise CompileError(f"C compiler {cc!r} cannot run ({exc}); install gcc or set $CC") from exc
    if out.returncode != 0:
        raise CompileError(f"{cc} does not accept -march={march}: {out.stderr.strip()[:300]}")
    macros = {line.split()[1] for line in out.stdout.splitlines() if line.startswith("#define ")}
    return frozenset(name for name, macro in _FEATURE_MACROS.items() if macro in macros)


@dataclass(frozen=True)
class Target:
    """A CPU to generate code for. Fields left at their defaults are filled in by ``__post_init__``:
    features from the compiler for ``march`` (or /proc/cpuinfo for ``native``), vector shape from
    the features, caches and cores from this machine."""

    # What the C backend maps that a pass may plan for (class attributes, not fields: no key change):
    # contractions onto GEMM micro-kernels (fusion keeps their epilogues in reach), and ops with a
    # hand-written form (``library_kernel_if``, e.g. 2-D max pool).
    tensorizes = True
    hand_written_kernels = True

    march: str = "native"
    arch: str = field(default_factory=platform.machine)
    features: frozenset[str] | None = field(default=None, repr=False)
    vector_width: int = 0          # fp32 lanes per vector register
    vector_registers: int = 0
    cores: int = 0
    l1d: int = 0                   # bytes, per core
    l2: int = 0                    # bytes, per core
    l3: int = 0                    # bytes, shared
    cc: str = ""
    cflags: tuple[str, ...] = DEFAULT_CFLAGS
    ldflags: tuple[str, ...] = DEFAULT_LDFLAGS

    def __post_init__(self) -> None:
        fill = functools.partial(object.__setattr__, self)
        if not self.cc:
            fill("cc", default_compiler())
        if self.features is None:
            if self.march == "native" and self.arch == platform.machine():
                try:
                    text = Path("/proc/cpuinfo").read_text()
                except OSError:
                    text = ""
                found = parse_cpuinfo_flags(text)
                found = found if found else compiler_features(self.cc, self.march)
                fill("features", found - features_turned_off())
            else:
                fill("features", compiler_features(self.cc, self.march))
        else:
            fill("features", frozenset(self.features))
        width, registers = vector_shape(self.arch, self.features)
        if not self.vector_width:
            fill("vector_width", width)
        if not self.vector_registers:
            fill("vector_registers", registers)
        if not self.cores:
            fill("cores", len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
        if not (self.l1d and self.l2 and self.l3):
            caches = read_cache_sizes()
            for name in ("l1d", "l2", "l3"):
                if not getattr(self, name):
                    fill(name, caches[name])

    @classmethod
    def host(cls) -> "Target":
        """The machine this process runs on, compiled for with ``-march=native``."""
        return _host()

    def replace(self, **changes) -> "Target":
        return dataclasses.replace(self, **changes)

    def with_fast_math(self, fast_math: bool) -> "Target":
        """This target compiling with ``-ffast-math`` (``compile(..., fast_math=True)``: gcc may assume
        no NaN/Inf, ignore the sign of zero, reassociate and use approximate reciprocals; a NaN
        may come out as a number) or with the IEEE flags.  Only the flag set
        changes, so the target key, and with it the compile cache and tuning records, tell the
        two builds apart."""
        flags = [f for f in self.cflags if f not in _MATH_MODE_FLAGS]
        mode = ["-ffast-math"] if fast_math else ["-fno-math-errno", "-fno-trapping-math"]
        return self.replace(cflags=(*flags[:1], *mode, *flags[1:]))

    @property
    def fast_math(self) -> bool:
        return "-ffast-math" in self.cflags or "-Ofast" in self.cflags

    def has(self, feature: str) -> bool:
        return feature in self.features

    @property
    def compile_flags(self) -> tuple[str, ...]:
        """Everything passed to the compiler besides file names, in order."""
        return (*self.cflags, f"-march={self.march}", *workaround_flags(self.cc, self.march),
                *vector_width_flags(self.features), *self.ldflags)

    def key(self) -> str:
        """A stable, readable name: ``<arch>-<isa>-<march>-<cores>c-<hash>``. The hash covers every
        field that changes code or timings (features matter for ``native``, which differs by host)."""
        isa = "avx512" if self.has("avx512f") else "avx2" if self.has("avx2") else "neon" if self.has("neon") else "base"
        relevant = sorted(self.features & KNOWN_FEATURES)
        blob = "|".join([
            self.arch, self.march, ",".join(relevant), str(self.vector_width), str(self.vector_registers),
            str(self.cores), str(self.l1d), str(self.l2), str(self.l3), compiler_version(self.cc),
            " ".join(self.compile_flags),
        ])
        digest = hashlib.sha256(blob.encode()).hexdigest()[:12]
        return f"{self.arch}-{isa}-{self.march}-{self.cores}c-{digest}"


@functools.lru_cache(maxsize=1)
def _host() -> Target:
    return Target()


@dataclass(frozen=True)
class GpuTarget:
    """A GPU to generate code for: what GPU schedules size their tiles by and what the verifier
    checks kernels against (docs/gpu.md).  ``language`` picks the printer and runtime.

    ``shared_per_block`` is the static shared memory a block may declare (48 KiB on NVIDIA: more
    needs the opt-in dynamic allocation, ``shared_per_block_optin``); registers are 32-bit.
    """

    tensorizes = False                  # no GEMM micro-kernels: contractions are scheduled loop nests
    hand_written_kernels = False        # every op with a tensor-expression form is lowered as one

    name: str
    language: str                       # "opencl" | "cuda"
    max_threads_per_block: int = 1024
    shared_per_block: int = 48 * 1024
    shared_per_block_optin: int = 48 * 1024
    registers_per_sm: int = 65536
    registers_per_thread: int = 255
    warp_size: int = 32
    sm_count: int = 1
    arch: str = ""                      # CUDA: "sm_90"; empty for OpenCL

    @classmethod
    def h200(cls) -> "GpuTarget":
        """NVIDIA H200 (Hopper, sm_90): 132 SMs, 227 KiB opt-in shared memory per block."""
        return cls("NVIDIA H200", "cuda", 1024, 48 * 1024, 227 * 1024, 65536, 255, 32, 132, "sm_90")

    @classmethod
    def opencl_default(cls) -> "GpuTarget":
        """The limits every OpenCL device tensorforge targets honours (PoCL on a CPU has more):
        256 work-items per group and 32 KiB of local memory."""
        return cls("OpenCL device", "opencl", 256, 32 * 1024, 32 * 1024, 65536, 255, 32, 1, "")

    def key(self) -> str:
        """Names the target in caches and the tuning database."""
        blob = "|".join(map(str, dataclasses.astuple(self)))
        return f"{self.language}-{self.arch or 'generic'}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"
