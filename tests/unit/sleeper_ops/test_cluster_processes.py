"""The cluster's processes: started in groups of their own, stopped with everything they
forked, and given none of the caller's Sleeper or Airflow settings."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sleeper_ops.cluster.environment import ROLES, WORKER_ROLES, compose_layout, process_environment
from sleeper_ops.cluster.processes import clean_environment, restart_process, start_process, stop_groups, wait_for_log


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


def test_the_scheduler_queues_again_a_task_left_queued_three_minutes() -> None:
    """A worker killed just after taking a task's message leaves it queued until the
    scheduler's task_queued_timeout (Airflow's default: 600 s); the cluster's is 180 s."""
    env = process_environment(compose_layout(), "scheduler")
    assert env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT"] == "180"
    assert env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL"] == "30"
    assert not [k for r in ROLES if r != "scheduler" for k in process_environment(compose_layout(), r)
                if "TASK_QUEUED" in k]


def test_a_restarted_process_runs_again_as_it_was_started_with_its_log_appended(tmp_path: Path) -> None:
    env = {**clean_environment(), "GREETING": "hello"}
    first = start_process("greeter", "", ["bash", "-c", 'echo "$GREETING from $PWD pid $$"; sleep 300 & wait'],
                          log=tmp_path / "greeter.log", env=env, cwd=tmp_path / "g")
    deadline = time.monotonic() + 30
    wait_for_log(first, r"hello from \S+ pid \d+", deadline)
    for kill in (False, True):
        before = first.process.pid
        again = restart_process(first, kill=kill)
        lines = wait_for_log(again, rf"(?s)hello from \S+ pid {again.process.pid}", deadline)
        assert not _alive(before) and _alive(again.process.pid), kill
        assert again.name == "greeter" and again.cwd == tmp_path / "g" and f"from {tmp_path / 'g'} " in lines
        first = again
    text = (tmp_path / "greeter.log").read_text()
    assert text.count("hello from") == 3 and text.count("--- greeter restarted ---") == 2
    stop_groups([first])


def test_the_cluster_kills_and_restarts_a_process_by_name_in_its_place(tmp_path: Path) -> None:
    from sleeper_ops.cluster.run import RunningCluster
    from sleeper_ops.errors import ConfigError

    pieces = [start_process(name, "", ["bash", "-c", "echo up; sleep 300 & wait"], log=tmp_path / f"{name}.log",
                            env=clean_environment(), cwd=tmp_path / name) for name in ("a", "b")]
    cluster = RunningCluster(compose_layout(), tmp_path, pieces=list(pieces))
    try:
        killed = cluster.kill("a")
        assert killed.process.returncode == -9 and cluster.dead() is not None and "the a exited" in cluster.dead()
        new = cluster.restart("a")
        assert cluster.pieces == [new, pieces[1]] and new.process.pid != killed.process.pid
        assert cluster.dead() is None
        with pytest.raises(ConfigError, match="no process 'c'"):
            cluster.restart("c")
    finally:
        stop_groups(cluster.pieces)
