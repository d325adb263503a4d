"""What the machine lacks (a C compiler, a writable cache, disk space, memory) is one clear
``TensorforgeError`` that says what to do, or for a read-only cache a warning and a working
compile; never a segfault or a raw traceback."""
from __future__ import annotations

import ctypes
import errno
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.codegen import target as target_module
from tensorforge.codegen.c import toolchain
from tensorforge.codegen.target import Target
from tensorforge.errors import (CacheWriteError, CompileError, CompilerNotFoundError, ResourceError,
                                TensorforgeError, TensorforgeWarning)
from tensorforge.runtime import buffers

from . import models

SOURCE = "int tf_resource_test(void) { return %d; }\n"
# A source with a translation unit of its own (compiled and cached apart, like the GEMM kernels).
UNIT_SOURCE = (toolchain.unit("TF_API int tf_resource_unit(void) { return 40; }")
               + "int tf_resource_unit(void);\nint tf_resource_test(void) { return tf_resource_unit() + %d; }\n")


def _have_compiler() -> bool:
    try:
        toolchain.require_compiler(Target.host().cc)
    except CompileError:
        return False
    return True


needs_compiler = pytest.mark.skipif(not _have_compiler(), reason="no C compiler on this machine")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh, empty compile cache; temporary folders (the fallback) under this test's tmp_path."""
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.setattr(toolchain, "_fallbacks", {})
    monkeypatch.setenv("TENSORFORGE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def host_from_env():
    """``Target.host()`` computed again under the test's environment ($CC, $PATH), and again after."""
    target_module._host.cache_clear()
    yield
    target_module._host.cache_clear()


def forbid_writes(monkeypatch, root: Path, code: int) -> None:
    """Creating a file or folder under ``root`` fails with ``code``, as on a read-only mount (EROFS)
    or a full disk (ENOSPC); reading, and writing anywhere else, still work."""
    real_open, real_mkdir = os.open, os.mkdir
    root = root.resolve()

    def under(path) -> bool:
        return Path(os.path.abspath(os.fsdecode(path))).is_relative_to(root)

    def refuse(path):
        return OSError(code, os.strerror(code), os.fsdecode(path))

    def guarded_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and under(path):
            raise refuse(path)
        return real_open(path, flags, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        if under(path) and not os.path.exists(path):
            raise refuse(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)


def value(lib: toolchain.CompiledLibrary) -> int:
    return lib.function("tf_resource_test", [], ctypes.c_int)()


# ---- no C compiler -------------------------------------------------------------------------
def test_cc_that_does_not_exist_names_it_and_says_what_to_do(cache, monkeypatch, host_from_env):
    monkeypatch.setenv("CC", "/nonexistent/gcc")
    with pytest.raises(CompilerNotFoundError) as info:
        tensorforge.compile(models.two_in_two_out(), threads=1)
    message = str(info.value)
    assert "$CC='/nonexistent/gcc' cannot run (No such file or directory)" in message
    assert "install one" in message and 'target="interpreter"' in message and "\n" not in message
    assert isinstance(info.value, CompileError) and isinstance(info.value, ResourceError)
    x, b = models.inputs(1)                          # the advice works: no compiler needed
    got = tensorforge.compile(models.two_in_two_out(), target="interpreter")(x, b)
    np.testing.assert_allclose(got[0], models.reference(x, b)[0], rtol=1e-5, atol=1e-5)


def test_no_compiler_on_path_names_what_was_looked_for(cache, monkeypatch, host_from_env, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))        # no gcc, no cc
    with pytest.raises(CompilerNotFoundError, match=r"a C compiler \(gcc or cc on \$PATH, tried 'cc'\) cannot run"):
        toolchain.compile_c(SOURCE % 1, name="no_cc")
    assert not cache.exists()                        # nothing was written


# ---- a read-only cache ---------------------------------------------------------------------
@needs_compiler
def test_read_only_cache_uses_what_it_holds_and_compiles_the_rest_elsewhere(cache, monkeypatch):
    warm = toolchain.compile_c(SOURCE % 1, name="warm")         # filled while writable
    forbid_writes(monkeypatch, cache, errno.EROFS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # a hit writes nothing: no warning
        again = toolchain.compile_c(SOURCE % 1, name="warm")
    assert again.cache_hit and again.path == warm.path
    with pytest.warns(TensorforgeWarning, match=r"cache .* is not writable \(Read-only file system\): this "
                                                r"process writes what it compiles to .*TENSORFORGE_CACHE") as caught:
        new = toolchain.compile_c(UNIT_SOURCE % 2, name="new")
    assert len(caught) == 1
    fallback = toolchain._fallbacks[cache]
    assert new.path.is_relative_to(fallback) and value(new) == 42 and not new.cache_hit
    assert len(list((fallback / "c" / "units").rglob("*.o"))) == 1          # the unit went there too
    with warnings.catch_warnings():
        warnings.simplefilter("error")                          # warned once per process
        other = toolchain.compile_c(SOURCE % 3, name="other")
        repeat = toolchain.compile_c(UNIT_SOURCE % 2, name="new")
    assert other.path.is_relative_to(fallback) and value(other) == 3
    assert repeat.cache_hit and repeat.path == new.path         # the stand-in is a cache too
    assert sorted(p.name for p in cache.rglob("*.so")) == [warm.path.name]


@needs_compiler
def test_read_only_cache_still_compiles_and_loads_models(small, cache, monkeypatch, tmp_path):
    saved = tmp_path / "small.tfm"
    small.save(saved)
    cache.mkdir()
    forbid_writes(monkeypatch, cache, errno.EROFS)
    x, b = models.inputs(2)
    with pytest.warns(TensorforgeWarning, match="not writable"):
        loaded = tensorforge.load(saved)                        # its library goes to the stand-in
    np.testing.assert_array_equal(loaded(x, b)[0], small(x, b)[0])
    compiled = tensorforge.compile(models.two_in_two_out(), threads=1)
    assert compiled.native.build["origin"] == "compiled"
    assert compiled.native.library_path.is_relative_to(toolchain._fallbacks[cache])
    np.testing.assert_array_equal(compiled(x, b)[1], small(x, b)[1])
    assert list(cache.iterdir()) == []


# ---- a full disk ---------------------------------------------------------------------------
@needs_compiler
def test_full_disk_is_a_cache_write_error_that_says_what_to_free(cache, monkeypatch):
    cache.mkdir()
    forbid_writes(monkeypatch, cache, errno.ENOSPC)
    with pytest.raises(CacheWriteError) as info:
        toolchain.compile_c(SOURCE % 4, name="full")
    message = str(info.value)
    assert message.startswith("cannot write the library of kernel 'full' to ") and str(cache) in message
    assert "No space left on device; free some space there, or point $TENSORFORGE_CACHE" in message
    assert isinstance(info.value, CompileError) and toolchain._fallbacks == {}      # no fallback for this
    assert list(cache.rglob("*")) == []                        # nothing half-written left


@needs_compiler
def test_saving_to_a_full_disk_says_so_and_leaves_nothing(small, monkeypatch, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    forbid_writes(monkeypatch, out, errno.ENOSPC)
    with pytest.raises(ResourceError, match=rf"cannot save the model to {out / 'small.tfm'}: No space left on "
                                            r"device; free some space there, or save it to a writable folder"):
        small.save(out / "small.tfm")
    assert list(out.iterdir()) == []


def test_compiler_running_out_of_space_is_a_cache_write_error(cache, tmp_path):
    fake = tmp_path / "fakecc"
    fake.write_text('#!/bin/sh\n[ "$1" = --version ] && { echo "fakecc 1.0"; exit 0; }\n'
                    'echo "cc1: fatal error: error writing to /tmp/ccX.s: No space left on device" >&2\nexit 1\n')
    fake.chmod(0o755)
    target = Target(cc=str(fake), features=frozenset())
    with pytest.raises(CacheWriteError, match=r"the C compiler ran out of disk space building kernel 'fake' "
                                              r"\(cc1: fatal error: .*No space left on device\): free some space"):
        toolchain.compile_c(SOURCE % 5, target, name="fake")


# ---- not enough memory for the weights -----------------------------------------------------
@needs_compiler
@pytest.mark.parametrize("how", ["less free than needed", "allocation fails"])
def test_weights_that_do_not_fit_in_memory_name_the_size(small, monkeypatch, tmp_path, how):
    saved = tmp_path / "small.tfm"
    small.save(saved)
    if how == "less free than needed":                         # Linux overcommits: checked before allocating
        monkeypatch.setattr(buffers, "CHECK_ABOVE", 0)
        monkeypatch.setattr(buffers, "available_memory", lambda: 100)
    else:
        def no_memory(nbytes, align=buffers.ALIGN):
            raise MemoryError(f"Unable to allocate {nbytes} bytes")
        monkeypatch.setattr(buffers, "aligned_empty", no_memory)
    nbytes = max(small.native.weights.nbytes, 64)
    with pytest.raises(TensorforgeError, match=rf"cannot allocate {nbytes} bytes .* for the weights of "
                                               rf"{saved}.*; free memory"):
        tensorforge.load(saved)
