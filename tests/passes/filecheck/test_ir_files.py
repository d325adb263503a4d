"""One test per IR file in this directory: RUN pipeline, FileCheck, numeric comparison."""
from pathlib import Path

import pytest

from tests.filecheck_util import check_ir_file, ir_files

HERE = Path(__file__).parent
FILES = ir_files(HERE)


def test_the_directory_has_ir_files():
    assert len(FILES) >= 10


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_ir_file(path):
    check_ir_file(path)
