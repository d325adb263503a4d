"""The docs stay true to the code: paths, links, commands, environment variables, quoted errors.

README.md and docs/*.md name files (``tensorforge/passes/fusion/engine.py``), other docs
(``docs/fusion.md``, ``[shapes](#static-and-dynamic-shapes)``), command lines and error messages.
Each of those rots silently when the code moves, so every one is checked here against the tree,
the real argument parser and the real exceptions.  The README's Python example is run too, on a
small zoo model instead of resnet18 to keep the test fast.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from tensorforge.cli import build_parser
from tensorforge.errors import TensorforgeError

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
README = ROOT / "README.md"
ALL_DOCS = [README, *DOCS]
USER_GUIDE = ROOT / "docs" / "user_guide.md"

# A repository path: starts at "tensorforge/", "tests/" or "benchmarks/" not preceded by a path
# character (so that "~/.cache/tensorforge/roofline.json" is not one), then path characters;
# "<family>" placeholders are cut off and their parent folder checked.
_PATH = re.compile(r"(?<![\w./~-])(?:tensorforge|tests|benchmarks)/[\w./<>*-]*")
# A module named by its file name alone (`engine.py`, `onnx_ops/importer.py`) in a section that
# says which package it is in.
_SHORT_MODULE = re.compile(r"`([\w/]+\.py)`")
_DOC_MENTION = re.compile(r"(?<![\w/])docs/[\w-]+\.md(?:#[\w-]+)?")
_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _fenced(text: str, lang: str) -> list[str]:
    return [body for kind, body in _FENCE.findall(text) if kind == lang]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text())
    return {_slug(m) for m in re.findall(r"^#+\s+(.*)$", text, re.M)}


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_named_path_exists():
    missing = []
    for doc in ALL_DOCS:
        for lineno, line in enumerate(doc.read_text().splitlines(), 1):
            for match in _PATH.findall(line):
                path = match.split("<")[0].split("*")[0].rstrip(".,:;")
                if not (ROOT / path).exists():
                    missing.append(f"{_rel(doc)}:{lineno}: {match}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


def test_every_module_named_by_file_name_exists():
    """``engine.py``-style names in the architecture doc and the extending guide are the tail of a
    real file of the package (or of the tests)."""
    files = ["/" + _rel(f) for top in ("tensorforge", "tests") for f in (ROOT / top).rglob("*.py")]
    names = [(doc, name) for doc in (ROOT / "docs" / "architecture.md", ROOT / "docs" / "extending.md")
             for name in _SHORT_MODULE.findall(doc.read_text())]
    assert len(names) >= 40
    missing = [f"{_rel(doc)}: {name}" for doc, name in names
               if not any(f.endswith("/" + name) for f in files)]
    assert not missing, "modules named in the docs that do not exist:\n" + "\n".join(missing)


def test_docs_named_in_docs_exist():
    """``docs/x.md`` mentions and relative markdown links resolve, anchors included."""
    broken = []
    for doc in ALL_DOCS:
        text = doc.read_text()
        targets = [(ROOT, m) for m in _DOC_MENTION.findall(text)]
        targets += [(doc.parent, m) for m in _MD_LINK.findall(text) if "://" not in m]
        for base, target in targets:
            file, _, anchor = target.partition("#")
            path = (base / file).resolve() if file else doc
            if not path.is_file():
                broken.append(f"{_rel(doc)}: {target} (no such file)")
            elif anchor and anchor not in _anchors(path):
                broken.append(f"{_rel(doc)}: {target} (no heading with that anchor)")
    assert not broken, "\n".join(broken)


def test_the_checks_above_see_what_they_check():
    """The patterns find the paths, links and anchors the docs really use (guards against a
    regex that matches nothing and so passes vacuously)."""
    guide = USER_GUIDE.read_text()
    assert "static-and-dynamic-shapes" in _anchors(USER_GUIDE)
    assert "tensorforgecompile-options" in _anchors(USER_GUIDE)
    assert "#reading-benchmark-numbers" in " ".join(_MD_LINK.findall(guide))
    arch = (ROOT / "docs" / "architecture.md").read_text()
    assert "tensorforge/tune/apply.py" in _PATH.findall(arch)
    assert "tests/lowering/harness.py" in _PATH.findall(arch)
    assert "database.py" in _SHORT_MODULE.findall(arch)
    assert _PATH.findall("cached in ~/.cache/tensorforge/roofline.json") == []
    assert "docs/user_guide.md#reading-benchmark-numbers" in _DOC_MENTION.findall(README.read_text())


def test_readme_names_only_registered_commands():
    commands = _commands()
    assert {"zoo", "demo", "bench", "compile", "run", "explain", "tune", "db"} <= set(commands)
    named = set(re.findall(r"(?:^|`)tensorforge ([a-z][\w-]*)", README.read_text(), re.M))
    assert {"bench", "compile", "run", "explain", "demo", "zoo"} <= named
    assert named <= set(commands), f"README names unknown commands: {sorted(named - set(commands))}"
    guide = set(re.findall(r"(?:^|`)tensorforge ([a-z][\w-]*)", USER_GUIDE.read_text(), re.M))
    assert guide <= set(commands), f"user guide names unknown commands: {sorted(guide - set(commands))}"
    assert set(commands) <= guide, f"commands the user guide does not describe: {sorted(set(commands) - guide)}"


def _example_command_lines() -> list[tuple[str, str]]:
    lines = []
    for doc in ALL_DOCS:
        for block in _fenced(doc.read_text(), "sh"):
            for line in block.splitlines():
                if line.startswith("tensorforge "):
                    lines.append((_rel(doc), line))
    return lines


def test_every_example_command_line_parses():
    """Each ``tensorforge ...`` line of a ```sh block is accepted by the real argument parser."""
    lines = _example_command_lines()
    assert len(lines) >= 20
    bad = []
    for where, line in lines:
        argv = shlex.split(line, comments=True)[1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = build_parser().parse_args(argv)
        except SystemExit:
            bad.append(f"{where}: {line}\n    {err.getvalue().strip().splitlines()[-1]}")
            continue
        assert args.command == argv[0]
    assert not bad, "example command lines the CLI rejects:\n" + "\n".join(bad)


def test_environment_variables_are_documented():
    """Every TENSORFORGE_* variable the package reads (from Python, or from the C it generates:
    ``getenv``) is in the user guide's table, and the guide documents no variable the package
    does not read."""
    read = set()
    for src in (ROOT / "tensorforge").rglob("*.py"):
        read |= set(re.findall(r"(?:environ(?:\.get\(|\[)|getenv\()\s*[\"'](TENSORFORGE_\w+)", src.read_text()))
    assert {"TENSORFORGE_CACHE", "TENSORFORGE_TUNE_DB", "TENSORFORGE_FUSION"} <= read
    table = {m for m in re.findall(r"^\| `(\w+)` \|", USER_GUIDE.read_text(), re.M)}
    documented = {v for v in table if v.startswith("TENSORFORGE_")}
    assert read == documented, f"read but undocumented: {sorted(read - documented)}; " \
                               f"documented but never read: {sorted(documented - read)}"


def _error_message(fn) -> str:
    with pytest.raises(TensorforgeError) as info:
        fn()
    return str(info.value)


def test_quoted_error_messages_are_the_real_ones(tmp_path, monkeypatch):
    """The messages the user guide quotes are what tensorforge raises today (cheap cases: one tiny
    C compile); a reworded message must be re-quoted."""
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper

    import tensorforge
    from tensorforge.commands.loading import load_model
    from tensorforge.ir.pass_manager import PassManager

    def save(op: str, name: str, n_inputs: int = 1, shape: list | None = None) -> None:
        inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape or [4]) for n in "xr"[:n_inputs]]
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        graph = helper.make_graph([helper.make_node(op, [i.name for i in inputs], ["y"])], name, inputs, [out])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
        onnx.save(model, str(tmp_path / name))

    save("RandomUniformLike", "random.onnx")
    save("MaxRoiPool", "roipool.onnx", 2)
    save("Relu", "dyn.onnx", shape=["N", 16])
    (tmp_path / "bad.onnx").write_bytes(b"this is not a model")
    monkeypatch.chdir(tmp_path)
    messages = [
        _error_message(lambda: tensorforge.compile("random.onnx")),
        _error_message(lambda: tensorforge.compile("roipool.onnx")),
        _error_message(lambda: tensorforge.compile("bad.onnx")),
        _error_message(lambda: tensorforge.compile("missing.onnx")),
        _error_message(lambda: tensorforge.compile("model.pt")),
        _error_message(lambda: load_model("resnet19")),
        _error_message(lambda: load_model("dyn.onnx")),
        _error_message(lambda: tensorforge.compile("dyn.onnx", dim_ranges={"N": (1, 8)})(np.zeros((9, 16), np.float32))),
        _error_message(lambda: PassManager.parse("nosuch")),
    ]
    guide = USER_GUIDE.read_text()
    assert messages[0] == "ONNX node 'RandomUniformLike_0' (RandomUniformLike, opset 17): rejected: it is random"
    assert messages[7] == "input 'x' axis 0 is 9, outside N's range 1..8"
    for message in messages:
        quoted = message.split("; known passes")[0]        # the guide abbreviates the pass list
        assert quoted in guide, f"the user guide does not quote this message as raised: {message}"


def test_readme_python_example_runs(capsys):
    """The README's 10-line example (its first Python block; later ones are fragments), with
    resnet18 swapped for a small zoo model, prints True twice."""
    torch = pytest.importorskip("torch")
    blocks = _fenced(README.read_text(), "python")
    code = blocks[0]
    assert len(code.strip().splitlines()) <= 10
    assert 'backend="tensorforge"' in code and 'models.get("resnet18")' in code
    torch._dynamo.reset()        # no automatic-dynamic state left by earlier tests in this process
    try:
        exec(compile(code.replace('"resnet18"', '"mlp_small"'), "README.md", "exec"), {})
    finally:
        torch._dynamo.reset()
    assert capsys.readouterr().out.split() == ["True", "True"]
