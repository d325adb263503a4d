"""A damaged ``.tfm`` never loads: every member is checked against the manifest before any code
from the file runs, and ``load(path, sha256=...)`` pins the whole file."""
from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

import tensorforge
from tensorforge.errors import ArtifactError, TensorforgeError
from tensorforge.runtime import artifact

from . import models

FLIPS = 100
SEED = 1234
MEMBERS = ["graph.mlir", "manifest.json", "model.c", "model.so", "weights.bin"]


@pytest.fixture(scope="module")
def saved(small, tmp_path_factory) -> Path:
    """The small model's artifact, saved once for every test here (which only read it)."""
    path = tmp_path_factory.mktemp("integrity") / "small.tfm"
    small.save(path)
    return path


def data_spans(raw: bytes) -> dict[str, tuple[int, int]]:
    """Each member's (offset, length) of its stored bytes in the file: after its local header,
    whose name and extra field lengths sit at bytes 26..30 of it."""
    spans = {}
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        for info in zf.infolist():
            name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
            spans[info.filename] = (info.header_offset + 30 + name_len + extra_len, info.compress_size)
    return spans


def members_of(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def flipped(data: bytes, at: int) -> bytes:
    """``data`` with one bit of byte ``at`` changed."""
    changed = bytearray(data)
    changed[at] ^= 0x01
    return bytes(changed)


def repack(path: Path, members: dict[str, bytes]) -> Path:
    """A well-formed zip of ``members`` (valid CRC-32s): damage that the zip itself cannot see."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_the_artifact_holds_every_member_and_the_manifest_hashes_all_others(saved):
    members = members_of(saved)
    assert sorted(members) == MEMBERS
    records = json.loads(members["manifest.json"])["members"]
    assert sorted(records) == sorted(set(MEMBERS) - {"manifest.json"})
    for name, record in records.items():
        assert record == {"bytes": len(members[name]), "sha256": hashlib.sha256(members[name]).hexdigest()}


def test_random_byte_flips_in_every_member_never_load(saved, tmp_path):
    raw = saved.read_bytes()
    spans = data_spans(raw)
    assert sorted(spans) == MEMBERS and all(length > 0 for _, length in spans.values())
    rng = np.random.default_rng(SEED)
    damaged = tmp_path / "damaged.tfm"
    hits = dict.fromkeys(MEMBERS, 0)
    for _ in range(FLIPS):
        name = MEMBERS[rng.integers(len(MEMBERS))]      # member first, so small members are hit too
        start, length = spans[name]
        at = start + int(rng.integers(length))
        flipped = bytearray(raw)
        flipped[at] ^= int(rng.integers(1, 256))
        damaged.write_bytes(flipped)
        with pytest.raises(ArtifactError) as info:     # any other exception type fails the test
            tensorforge.load(damaged)
        message = str(info.value)
        assert name in message and "damaged" in message and "\n" not in message, (name, at, message)
        hits[name] += 1
    assert min(hits.values()) >= 5, hits


def test_damage_is_found_before_any_library_is_loaded_or_compiled(saved, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(artifact, "load_library", lambda path: calls.append(path))
    from tensorforge.codegen.c import toolchain
    monkeypatch.setattr(toolchain, "compile_c", lambda *a, **k: calls.append(a))
    members = members_of(saved)
    members["weights.bin"] = flipped(members["weights.bin"], -1)
    with pytest.raises(ArtifactError, match="weights.bin is damaged"):
        tensorforge.load(repack(tmp_path / "bad_weights.tfm", members))
    assert calls == []


@pytest.mark.parametrize("name", ["model.so", "model.c", "weights.bin", "graph.mlir"])
def test_a_changed_member_with_a_valid_crc_is_caught_by_its_manifest_digest(saved, tmp_path, name):
    members = members_of(saved)
    members[name] = flipped(members[name], len(members[name]) // 2)
    with pytest.raises(ArtifactError, match=rf"{name} is damaged \(sha256 [0-9a-f]{{16}}\.\.\., the manifest says"):
        tensorforge.load(repack(tmp_path / "repacked.tfm", members))


def test_a_member_of_another_size_is_damaged(saved, tmp_path):
    members = members_of(saved)
    members["graph.mlir"] += b"\n"
    with pytest.raises(ArtifactError, match="graph.mlir is damaged .*bytes, the manifest says"):
        tensorforge.load(repack(tmp_path / "longer.tfm", members))


@pytest.mark.parametrize("name", ["model.so", "model.c", "weights.bin", "graph.mlir"])
def test_a_missing_member_is_named(saved, tmp_path, name):
    members = members_of(saved)
    del members[name]
    with pytest.raises(ArtifactError, match=rf"incomplete: it has no {name}; recompile .* download"):
        tensorforge.load(repack(tmp_path / "incomplete.tfm", members))


def test_a_member_the_manifest_does_not_list_is_refused(saved, tmp_path):
    members = {**members_of(saved), "extra.bin": b"anything"}
    with pytest.raises(ArtifactError, match="member 'extra.bin' that its manifest does not list"):
        tensorforge.load(repack(tmp_path / "extra.tfm", members))


def test_a_member_stored_twice_is_refused(saved, tmp_path):
    path = repack(tmp_path / "twice.tfm", members_of(saved))
    with zipfile.ZipFile(path, "a") as zf, pytest.warns(UserWarning, match="Duplicate name"):
        zf.writestr("model.so", b"\x7fELF another library")
    with pytest.raises(ArtifactError, match="model.so is damaged .*stored more than once"):
        tensorforge.load(path)


@pytest.mark.parametrize("keep", [0, 100, 0.5, -1])
def test_a_truncated_file_says_so(saved, tmp_path, keep):
    raw = saved.read_bytes()
    cut = tmp_path / "cut.tfm"
    cut.write_bytes(raw[:int(keep * len(raw)) if isinstance(keep, float) else keep])
    with pytest.raises(ArtifactError, match="not a tensorforge model artifact .*truncated"):
        tensorforge.load(cut)


def test_a_file_that_is_not_a_zip_or_not_a_file(tmp_path):
    junk = tmp_path / "junk.tfm"
    junk.write_bytes(b"#!/bin/sh\necho not a model\n" * 40)
    with pytest.raises(ArtifactError, match="junk.tfm is not a tensorforge model artifact"):
        tensorforge.load(junk)
    with pytest.raises(ArtifactError, match="is a folder"):
        tensorforge.load(tmp_path)
    with pytest.raises(ArtifactError, match="no model artifact at"):
        tensorforge.load(tmp_path / "missing.tfm")


def test_a_manifest_that_is_not_json_is_damaged(saved, tmp_path):
    members = {**members_of(saved), "manifest.json": b'{"format": "tensorforge-model", '}
    with pytest.raises(ArtifactError, match=r"manifest.json is damaged \(.*\); recompile"):
        tensorforge.load(repack(tmp_path / "half_manifest.tfm", members))


def test_the_right_sha256_pin_loads_and_runs(small, saved):
    digest = hashlib.sha256(saved.read_bytes()).hexdigest()
    loaded = tensorforge.load(saved, sha256=digest.upper())         # case does not matter
    x, b = models.inputs(3)
    np.testing.assert_array_equal(loaded(x, b)[0], small(x, b)[0])


def test_a_wrong_sha256_pin_shows_both_digests(saved):
    digest = hashlib.sha256(saved.read_bytes()).hexdigest()
    wrong = hashlib.sha256(b"another file").hexdigest()
    with pytest.raises(ArtifactError) as info:
        tensorforge.load(saved, sha256=wrong)
    message = str(info.value)
    assert f"sha256 {digest[:16]}..." in message and f"pinned {wrong[:16]}..." in message
    assert digest not in message                                    # short digests: one readable line


@pytest.mark.parametrize("pin", ["abc", "g" * 64, 123])
def test_a_malformed_sha256_pin_is_an_argument_error(saved, pin):
    with pytest.raises(TensorforgeError, match="64 hex digits"):
        tensorforge.load(saved, sha256=pin)


def test_an_artifact_saved_before_member_digests_still_loads_and_is_checked(small, saved, tmp_path):
    members = members_of(saved)
    manifest = json.loads(members["manifest.json"])
    del manifest["members"]
    members["manifest.json"] = json.dumps(manifest).encode()
    loaded = tensorforge.load(repack(tmp_path / "old.tfm", members))
    x, b = models.inputs(4)
    np.testing.assert_array_equal(loaded(x, b)[1], small(x, b)[1])
    members["model.so"] = flipped(members["model.so"], -1)          # its library_sha256 still guards it
    with pytest.raises(ArtifactError, match="model.so is damaged"):
        tensorforge.load(repack(tmp_path / "old_damaged.tfm", members))
