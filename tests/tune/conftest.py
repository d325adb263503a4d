"""Fixtures shared by the tuning tests: a small MLP-like model (its GEMMs and loop kernels are the
tasks most tests tune), imported once per module (compile copies a ModuleOp, so tests reuse it)."""
import pytest

import tensorforge

from tests.tune.tune_util import stack_model


@pytest.fixture(scope="module")
def model():
    return stack_model(rows=64, width=64)


@pytest.fixture(scope="module")
def graph(model):
    return tensorforge.import_model(*model)
