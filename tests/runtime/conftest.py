"""A private compile cache for the runtime tests, and the compiled models they share."""
from __future__ import annotations

import pytest

import tensorforge

from . import models


@pytest.fixture(scope="package", autouse=True)
def private_cache(tmp_path_factory):
    """Points the compile cache at a fresh folder (subprocesses inherit it through the environment)."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("tfcache")
        mp.setenv("TENSORFORGE_CACHE", str(path))
        yield path


@pytest.fixture(scope="package")
def small(private_cache):
    """The two-input, two-output model compiled for the host, on one thread."""
    return tensorforge.compile(models.two_in_two_out(), threads=1)
