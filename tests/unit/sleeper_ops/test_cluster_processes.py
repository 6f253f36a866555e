"""The cluster's processes: started in groups of their own, stopped with everything they
forked, and given none of the caller's Sleeper or Airflow settings."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sleeper_ops.cluster.environment import ROLES, WORKER_ROLES, compose_layout, process_environment
from sleeper_ops.cluster.processes import clean_environment, start_process, stop_groups, wait_for_log


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "\tZ" not in status.read_text().split("State:")[1].splitlines()[0]


def test_stop_kills_a_group_that_ignores_sigterm_with_the_children_it_forked(tmp_path: Path) -> None:
    stubborn = start_process("stubborn", "", ["bash", "-c", 'trap "" TERM; sleep 300 & echo "child $!"; wait'],
                             log=tmp_path / "stubborn.log", env=clean_environment(), cwd=tmp_path / "s")
    polite = start_process("polite", "", ["bash", "-c", 'sleep 300 & echo "child $!"; wait'],
                           log=tmp_path / "polite.log", env=clean_environment(), cwd=tmp_path / "p")
    deadline = time.monotonic() + 30
    children = [int(wait_for_log(p, r"child \d+", deadline).split()[1]) for p in (stubborn, polite)]
    started = time.monotonic()
    assert stop_groups([stubborn, polite], grace=5.0) == ["stubborn"]
    assert time.monotonic() - started < 20
    assert [pid for pid in [*children, stubborn.process.pid, polite.process.pid] if _alive(pid)] == []


def test_no_process_inherits_the_callers_sleeper_or_airflow_settings() -> None:
    env = clean_environment({"PATH": "/usr/bin", "SLEEPER_HOME": "/mine", "SLEEPER_STATE_STORE_DSN": "x",
                             "AIRFLOW_HOME": "/a", "AIRFLOW__CORE__EXECUTOR": "LocalExecutor", "LANG": "C"})
    assert set(env) == {"PATH", "LANG"} and env["PATH"].endswith(os.pathsep + "/usr/bin")


def test_workers_get_no_sleeper_home_and_no_metadata_database_but_the_connections() -> None:
    layout = compose_layout()
    for role in ROLES:
        env = process_environment(layout, role)
        assert {"AIRFLOW_CONN_SLEEPER_DEFAULT", "AIRFLOW_CONN_AWS_DEFAULT"} <= set(env), role
        if role in WORKER_ROLES:
            assert not [k for k in env if k.startswith("SLEEPER_") or k == "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
