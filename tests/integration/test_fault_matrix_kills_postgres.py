"""The fault matrix's SIGKILL row on PostgreSQL: every writer killed mid-run and run
again, ending exact (see :mod:`tests.integration.kill_matrix`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.kill_matrix import WRITERS, kill_and_run_again, postgres_home

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_killed_mid_run_and_run_again_loses_and_doubles_nothing(writer: str, pg_dsn: str,
                                                                         tmp_path: Path) -> None:
    kill_and_run_again(writer, "postgres", postgres_home(tmp_path, pg_dsn), tmp_path)
