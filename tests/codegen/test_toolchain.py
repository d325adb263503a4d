"""The C toolchain: content-hash cache (hit/miss, atomic, cross-process), compile errors, targets."""
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tensorforge.codegen import Target
from tensorforge.codegen.c import toolchain
from tensorforge.codegen.c.toolchain import compile_c
from tensorforge.codegen.target import parse_cache_size, parse_cpuinfo_flags
from tensorforge.errors import CompileError

ADD = "int tf_test_add(int a, int b) { return a + b + %d; }\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _add(lib, a, b):
    fn = lib.function("tf_test_add")
    import ctypes
    fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return fn(a, b)


def test_miss_then_hit_runs_the_compiler_once(cache):
    runs = toolchain.stats.compiler_runs
    first = compile_c(ADD % 1, name="add")
    assert not first.cache_hit
    assert toolchain.stats.compiler_runs == runs + 1
    second = compile_c(ADD % 1, name="add")
    assert second.cache_hit and second.path == first.path
    assert toolchain.stats.compiler_runs == runs + 1          # no compiler on the hit
    assert _add(second, 2, 3) == 6
    assert first.path.is_relative_to(cache) and first.source_path.read_text() == ADD % 1


def test_source_and_flags_change_the_key(cache):
    a = compile_c(ADD % 2, name="add")
    b = compile_c(ADD % 3, name="add")
    c = compile_c(ADD % 2, name="add", extra_flags=("-DUNUSED=1",))
    assert len({a.digest, b.digest, c.digest}) == 3
    assert (_add(a, 0, 0), _add(b, 0, 0), _add(c, 0, 0)) == (2, 3, 2)


def test_concurrent_compiles_of_one_source_leave_one_whole_library(cache):
    with ThreadPoolExecutor(4) as pool:
        libs = list(pool.map(lambda _: compile_c(ADD % 4, name="add"), range(4)))
    assert {lib.path for lib in libs} == {libs[0].path}
    assert all(_add(lib, 1, 1) == 6 for lib in libs)
    leftovers = [p for p in cache.rglob("*") if p.suffix == ".tmp"]
    assert leftovers == []


def test_compile_error_names_kernel_first_error_and_kept_source(cache):
    broken = "int tf_broken(void) { return undeclared_thing + ; }\n"
    with pytest.raises(CompileError) as info:
        compile_c(broken, name="my_kernel")
    msg = str(info.value)
    assert "my_kernel" in msg and "error" in msg and "undeclared_thing" in msg
    kept = Path(msg.split("generated source kept at ")[1].split()[0])
    assert kept.read_text() == broken
    assert not list(cache.rglob("*.so"))                      # nothing half-built is cached


def _compile_in_subprocess(cache, source):
    code = ("from tensorforge.codegen.c.toolchain import compile_c, stats\n"
            f"lib = compile_c({source!r}, name='add')\n"
            "print(lib.cache_hit, stats.compiler_runs)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "TENSORFORGE_CACHE": str(cache)})
    return out.stdout.split()


def test_another_process_hits_the_cache(cache):
    compile_c(ADD % 5, name="add")
    assert _compile_in_subprocess(cache, ADD % 5) == ["True", "0"]


def test_damaged_cached_library_is_rebuilt(cache):
    # Damaged in place, seen by a fresh process (this one keeps the first library mapped).
    first = compile_c(ADD % 7, name="add")
    first.path.write_bytes(b"not a shared library")
    assert _compile_in_subprocess(cache, ADD % 7) == ["False", "1"]
    assert first.path.read_bytes().startswith(b"\x7fELF")


def test_unwritable_cache_raises_compile_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("TENSORFORGE_CACHE", str(blocker / "sub"))
    with pytest.raises(CompileError, match="TENSORFORGE_CACHE"):
        compile_c(ADD % 8, name="add")


def test_missing_compiler_says_what_to_do(cache):
    with pytest.raises(CompileError, match=r"\$CC"):
        compile_c(ADD % 6, target=Target(cc="/nonexistent/tf-cc", features=frozenset()), name="add")


def test_host_target_is_sane():
    t = Target.host()
    assert t.vector_width == (16 if t.has("avx512f") else 8 if t.has("avx2") else 4)
    assert t.vector_registers in (16, 32)
    assert t.cores == len(os.sched_getaffinity(0))
    assert 0 < t.l1d < t.l2 <= t.l3
    assert "-march=native" in t.compile_flags and "-O3" in t.compile_flags and "-fopenmp" in t.compile_flags
    assert t.key() == Target.host().key() == Target().key()
    assert t.key() != t.replace(cores=t.cores + 1).key()


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 -march levels")
@pytest.mark.parametrize("march, width, has, lacks", [
    ("x86-64-v3", 8, {"avx2", "fma"}, {"avx512f"}),
    ("x86-64-v4", 16, {"avx2", "fma", "avx512f", "avx512bw"}, set()),
])
def test_cross_target_features_come_from_the_compiler(march, width, has, lacks):
    t = Target(march=march)
    assert t.vector_width == width and has <= t.features and not (lacks & t.features)
    assert f"-march={march}" in t.compile_flags
    assert t.key() != Target.host().key()


def test_parsers():
    text = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f\n\nprocessor\t: 1\nflags\t: fpu\n"
    assert parse_cpuinfo_flags(text) == {"fpu", "sse2", "avx2", "fma", "avx512f"}
    assert "neon" in parse_cpuinfo_flags("Features\t: fp asimd evtstrm\n")
    assert [parse_cache_size(s) for s in ("32K\n", "1024K", "32M", "512")] == [32768, 1 << 20, 32 << 20, 512]


# ---- translation units ------------------------------------------------------------------------

_UNIT = "TF_API int tf_unit_twice(int x) { return 2 * x + %d; }\n"


def _with_unit(main_extra: int, unit_extra: int) -> str:
    """A main unit calling a marked unit's hidden function (declared, as tensorize.py does)."""
    return (f"int tf_unit_twice(int x);\nint tf_test_add(int a, int b) {{ return tf_unit_twice(a) + b + {main_extra}; }}\n"
            + toolchain.unit(_UNIT % unit_extra) + toolchain.unit(_UNIT % unit_extra))


def test_split_units_takes_each_distinct_unit_once():
    main, units = toolchain.split_units("A" + toolchain.unit("u1") + "B" + toolchain.unit("u2") + toolchain.unit("u1"))
    assert main.split() == ["A", "B"] and len(units) == 2
    assert units[0].endswith("u1\n") and units[1].endswith("u2\n") and "visibility(\"hidden\")" in units[0]
    assert toolchain.split_units("plain") == ("plain", [])
    with pytest.raises(CompileError, match="never closed"):
        toolchain.split_units("x" + toolchain.UNIT_BEGIN + "y")


def test_units_compile_once_and_are_shared_between_libraries(cache):
    toolchain.stats.reset()
    lib = compile_c(_with_unit(1, 100), name="with_unit")
    assert _add(lib, 3, 4) == 2 * 3 + 100 + 4 + 1
    assert toolchain.stats.unit_runs == 1 and toolchain.stats.unit_hits == 0   # the duplicate unit: once
    # another library with the same unit links the cached object: one compiler run, for its main unit
    other = compile_c(_with_unit(2, 100), name="with_unit")
    assert _add(other, 3, 4) == 2 * 3 + 100 + 4 + 2
    assert toolchain.stats.unit_runs == 1 and toolchain.stats.unit_hits == 1
    assert len(list(cache.glob("c/units/*/unit-*.o"))) == 1
    # the unit's function is hidden: not a symbol of the library
    with pytest.raises(CompileError, match="tf_unit_twice"):
        lib.function("tf_unit_twice")


def test_error_in_a_unit_names_its_source(cache):
    with pytest.raises(CompileError, match="unit-") as err:
        compile_c("int tf_ok(void) { return 1; }\n" + toolchain.unit("int broken( {"), name="bad_unit")
    assert "error" in str(err.value)


def test_the_compile_command_carries_every_code_generation_flag_of_the_key():
    """What the cache key calls the flags is what the compiler gets: ``Target.compile_flags``
    (march, its workarounds, the vector width preference of AVX-512 targets) less the link-only
    ones; an AVX-512 target's loops are vectorized at 512 bits, others get no such flag."""
    avx512 = Target.host().replace(features=frozenset({"avx512f", "avx512bw", "avx2", "fma"}))
    command = toolchain.compile_command(Path("k.c"), Path("k.o"), avx512)
    assert "-mprefer-vector-width=512" in command
    assert set(avx512.compile_flags) - set(avx512.ldflags) - {"-shared"} <= set(command)
    avx2 = avx512.replace(features=frozenset({"avx2", "fma"}))
    assert not any(f.startswith("-mprefer-vector-width") for f in toolchain.compile_command(Path("k.c"), Path("k.o"), avx2))
