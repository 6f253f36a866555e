"""docker-compose.yaml is the topology ``sleeper cluster`` starts, with the same
environment for every Airflow process (no Docker needed: the file is parsed, not run).

The expected environment of each role is :func:`process_environment` of
:func:`compose_layout` (the services under their compose names): the one function
``sleeper cluster`` starts its processes with, so the file cannot drift from it."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from sleeper_ops.cluster.environment import (
    COMPOSE_SERVICES,
    COMPOSE_SUPPORT_SERVICES,
    EXECUTOR,
    ROLES,
    WORKER_ROLES,
    client_config,
    compose_layout,
    process_environment,
    role_command,
)

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
PUBLIC_IMAGES = {"postgres:17-bookworm", "redis:7-bookworm"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def _env(service: dict) -> dict[str, str]:
    return {k: str(v) for k, v in (service.get("environment") or {}).items()}


def test_the_services_are_the_processes_sleeper_cluster_starts(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == set(COMPOSE_SERVICES.values()) | set(COMPOSE_SUPPORT_SERVICES)
    assert [name for name, s in services.items() if "build" in s] == ["airflow-init"]
    assert (REPO / services["airflow-init"]["build"]["dockerfile"]).is_file()
    for name, s in services.items():
        assert s["image"] in PUBLIC_IMAGES | {"sleeper-airflow:local"}, name


def test_every_airflow_process_gets_exactly_the_environment_sleeper_cluster_gives_it(compose: dict) -> None:
    layout = compose_layout()
    for role in ROLES:
        service = compose["services"][COMPOSE_SERVICES[role]]
        assert _env(service) == process_environment(layout, role), role
        assert shlex.split(service["command"]) == ["airflow", *role_command(role, layout)], role


def test_the_shape_is_celery_with_workers_that_see_no_sleeper_home(compose: dict) -> None:
    services = compose["services"]
    for role in ROLES:
        env = _env(services[COMPOSE_SERVICES[role]])
        assert env["AIRFLOW__CORE__EXECUTOR"] == EXECUTOR == "CeleryExecutor"
        assert env["AIRFLOW__CELERY__BROKER_URL"].startswith("redis://redis:")
        conn = json.loads(env["AIRFLOW_CONN_SLEEPER_DEFAULT"])
        assert conn["extra"]["aws_conn_id"] == "aws_default"
        assert json.loads(env["AIRFLOW_CONN_AWS_DEFAULT"])["extra"]["endpoint_url"] == "http://moto:5000"
    for role in WORKER_ROLES:
        worker = services[COMPOSE_SERVICES[role]]
        env = _env(worker)
        assert "SLEEPER_HOME" not in env and "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env, role
        assert not worker.get("volumes"), f"{role} mounts {worker.get('volumes')}: it must share no path"
    assert sum(1 for s in services.values() if "celery worker" in str(s.get("command"))) == 2


def test_the_api_servers_sleeper_home_names_the_stores_of_the_connections(compose: dict) -> None:
    api = compose["services"]["airflow-apiserver"]
    assert "./docker/sleeper.toml:/opt/sleeper/sleeper.toml:ro" in api["volumes"]
    assert tomllib.loads((REPO / "docker" / "sleeper.toml").read_text()) == client_config(compose_layout())


def test_the_support_services_match_the_layout(compose: dict) -> None:
    services = compose["services"]
    layout = compose_layout()
    assert f"--bucket {layout.bucket}" in services["moto"]["command"]
    assert "--port 5000" in services["moto"]["command"]
    assert layout.spark_master.removeprefix("spark://") == "spark-master:7077"
    assert "--port 7077" in services["spark-master"]["command"]
    for worker in ("spark-worker-1", "spark-worker-2"):
        assert layout.spark_master in services[worker]["command"]
    assert "--port 8998" in services["spark-service"]["command"] and layout.spark_service == "http://spark-service:8998"
    assert "CREATE DATABASE airflow" in (REPO / "docker" / "postgres-init.sql").read_text()
    assert "@postgres:5432/airflow" in layout.metadata_url


def test_ports_are_published_on_loopback_only(compose: dict) -> None:
    for name, s in compose["services"].items():
        for port in s.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_airflow_init_prepares_the_database_as_sleeper_cluster_does_with_the_workers_connection(compose: dict) -> None:
    """airflow-init migrates, creates the spark pool and writes sleeper_default (so the UI
    lists it and its Test button works) with exactly the fields every Airflow process is
    given as AIRFLOW_CONN_SLEEPER_DEFAULT."""
    from sleeper_ops.cluster.compose_init import commands
    from sleeper_ops.orchestration.connections import COMMAND

    init = compose["services"]["airflow-init"]
    assert init["command"] == ["python", "-m", "sleeper_ops.cluster.compose_init"]
    done = commands()
    assert [c[:2] for c in done] == [["db", "migrate"], ["pools", "set"], [COMMAND, "sleeper_default"]]
    written = json.loads(done[2][2])
    for role in ROLES:
        given = json.loads(_env(compose["services"][COMPOSE_SERVICES[role]])["AIRFLOW_CONN_SLEEPER_DEFAULT"])
        assert written == given, role
    assert _env(init)["AIRFLOW__CORE__TEST_CONNECTION"] == "Enabled"
