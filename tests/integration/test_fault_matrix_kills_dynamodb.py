"""The fault matrix's SIGKILL row on DynamoDB + S3 (moto): every writer killed mid-run and run
again, ending exact (see :mod:`tests.integration.kill_matrix`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.kill_matrix import WRITERS, dynamodb_home, kill_and_run_again, moto_address

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    yield from moto_address()


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_killed_mid_run_and_run_again_loses_and_doubles_nothing(writer: str, moto: str,
                                                                         tmp_path: Path) -> None:
    kill_and_run_again(writer, "dynamodb", dynamodb_home(tmp_path, moto), tmp_path)
