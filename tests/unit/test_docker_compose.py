"""docker-compose.yaml is well formed and wired to one configuration (no Docker needed:
it is parsed, not run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sleeper_ops.config import SleeperConfig

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[2]
SERVICES = {"postgres", "minio", "minio-init", "spark-master", "spark-worker", "airflow-init", "airflow-apiserver",
            "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
PUBLIC_IMAGES = {"postgres:17-bookworm", "minio/minio:latest", "minio/mc:latest"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yaml").read_text())


def test_every_service_is_there_with_a_known_image(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    built = [name for name, s in services.items() if "build" in s]
    assert built == ["airflow-init"]
    assert (REPO / services["airflow-init"]["build"]["dockerfile"]).is_file()
    for name, s in services.items():
        assert s["image"] in PUBLIC_IMAGES | {"sleeper-airflow:local"}, name


def test_ports_are_published_on_loopback_only(compose: dict) -> None:
    for name, s in compose["services"].items():
        for port in s.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_sleeper_services_share_one_configuration(compose: dict, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose["services"]
    sleeper = [n for n, s in services.items() if s["image"] == "sleeper-airflow:local"]
    dsn = {services[n]["environment"]["SLEEPER_STATE_STORE_DSN"] for n in sleeper}
    assert len(dsn) == 1
    assert {services[n]["environment"]["SLEEPER_HOME"] for n in sleeper} == {"/opt/sleeper"}
    for n in sleeper:
        assert "./docker/sleeper.toml:/opt/sleeper/sleeper.toml:ro" in services[n]["volumes"], n
    airflow = [n for n in sleeper if n.startswith("airflow")]
    assert len({services[n]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] for n in airflow}) == 1
    conn = json.loads(services["airflow-scheduler"]["environment"]["AIRFLOW_CONN_SLEEPER_SPARK"])
    (tmp_path / "sleeper.toml").write_text((REPO / "docker" / "sleeper.toml").read_text())
    monkeypatch.setenv("SLEEPER_STATE_STORE_DSN", dsn.pop())
    config = SleeperConfig.load(tmp_path, create=False)
    assert conn["host"] == config.spark_master == "spark://spark-master:7077"
    assert config.object_store_uri.startswith("s3://sleeper-data/")
    assert config.s3 is not None and config.s3.endpoint_override == "minio:9000"
    assert config.state_store_dsn == "postgresql://sleeper:sleeper@postgres:5432/sleeper"
    assert "mc mb --ignore-existing local/sleeper-data" in services["minio-init"]["entrypoint"]
    assert "CREATE DATABASE airflow" in (REPO / "docker" / "postgres-init.sql").read_text()
