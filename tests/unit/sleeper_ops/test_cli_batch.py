"""``sleeper_ops.orchestration.cli_batch``: several ``airflow`` commands in one interpreter, in
order, stopping at the first that fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sleeper_ops.orchestration.cli_batch import parse_commands


def test_each_argument_is_a_json_list_of_words() -> None:
    assert parse_commands(['["db", "migrate"]', '["pools", "set", "spark", "2", "Spark jobs"]']) == [
        ["db", "migrate"], ["pools", "set", "spark", "2", "Spark jobs"]]


@pytest.mark.parametrize("bad", ['["pools"', '"db migrate"', "[]", '["pools", 2]', "{}"])
def test_anything_else_is_refused_before_airflow_runs(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_commands([bad])


def test_the_commands_run_in_order_and_the_first_failure_ends_the_batch(tmp_path: Path) -> None:
    env = {"AIRFLOW_HOME": str(tmp_path / "airflow"), "PATH": "/usr/bin:/bin",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    # "pools set" without its arguments is refused by Airflow's parser (exit status 2), so the
    # second version never runs
    p = subprocess.run([sys.executable, "-m", "sleeper_ops.orchestration.cli_batch", '["version"]',
                        '["pools", "set"]', '["version"]'], env=env, capture_output=True, text=True, timeout=120)
    out = p.stdout
    assert p.returncode == 2, out + p.stderr
    assert out.count("--- airflow version") == 1 and "--- airflow pools set" in out, out
    assert out.index("--- airflow version") < out.index("--- airflow pools set"), out
    assert (tmp_path / "airflow" / "airflow.cfg").exists()  # the default configuration, as airflow writes it
