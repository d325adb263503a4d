"""Without Ray, ``--ray`` (and ``tune(cluster=...)``) say in one line how to install the extra."""
import sys

import pytest

import tensorforge
from tensorforge.cli import main as cli_main
from tensorforge.errors import TensorforgeError


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)         # ``import ray`` raises ImportError


def test_cli_ray_without_ray_prints_how_to_install(no_ray, capsys, tmp_path):
    rc = cli_main(["tune", "mlp_small", "--ray", "local:2", "--db", str(tmp_path / "t.sqlite")])
    err = capsys.readouterr().err.strip()
    assert rc == 1
    assert len(err.splitlines()) == 1 and "pip install 'tensorforge[ray]'" in err


def test_api_cluster_without_ray_raises_the_same_hint(no_ray, tmp_path):
    with pytest.raises(TensorforgeError, match=r"pip install 'tensorforge\[ray\]'"):
        tensorforge.tune("unused", cluster="local:1", db=str(tmp_path / "t.sqlite"))
