"""The ``sleeper_default`` connection ``sleeper airflow`` and ``sleeper cluster`` write into
Airflow's metadata database, with the connection test enabled: the UI lists it, the REST
API reads it, its Test button reaches the Sleeper they run with; one a user created is
kept as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

pytest.importorskip("airflow")

from sleeper_ops.airflow.hooks.connection import config_from_connection
from sleeper_ops.cluster import environment as envs
from sleeper_ops.config import SleeperConfig
from sleeper_ops.orchestration.connections import connection_command, standalone_connection, write_connection
from sleeper_ops.orchestration.standalone import airflow_environment


@pytest.fixture
def session() -> Iterator[Any]:
    """A session on an in-memory database holding Airflow's connection table only."""
    from airflow.models.connection import Connection
    from airflow.models.team import Team
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine("sqlite://")
    Connection.metadata.create_all(engine, tables=[Team.__table__, Connection.__table__])
    with Session(engine) as s:
        yield s


def test_sleeper_airflow_enables_the_connection_test(tmp_path: Path) -> None:
    config = SleeperConfig.from_dict(tmp_path, {})
    env = airflow_environment(config, state_dsn="postgresql:///sleeper", metadata_url="postgresql+psycopg:///airflow",
                              port=18099, base={"PATH": "/usr/bin"})
    assert env["AIRFLOW__CORE__TEST_CONNECTION"] == "Enabled"


def test_every_process_of_sleeper_cluster_has_the_connection_test_enabled() -> None:
    layout = envs.compose_layout()
    for role in envs.ROLES:
        assert envs.process_environment(layout, role)["AIRFLOW__CORE__TEST_CONNECTION"] == "Enabled", role


def test_the_standalone_connection_opens_the_sleeper_of_its_home(tmp_path: Path) -> None:
    config = SleeperConfig.load(tmp_path)
    fields = standalone_connection(config)
    assert fields["conn_type"] == "sleeper" and set(fields) == {"conn_type", "extra"}, "no secret in it"
    opened = config_from_connection(host=None, port=None, login=None, password=None, schema=None,
                                    extra=fields["extra"], default_home=Path("/elsewhere"))
    assert opened == config


def test_the_connection_is_created_then_rewritten_by_the_next_start(session: Any) -> None:
    from airflow.models.connection import Connection

    line = write_connection("sleeper_default", {"conn_type": "sleeper", "extra": {"config_home": "/a"}},
                            "sleeper airflow", session)
    assert line == "connection sleeper_default created: the Sleeper of /a/sleeper.toml"
    line = write_connection("sleeper_default", {"conn_type": "sleeper", "extra": {"config_home": "/b"}},
                            "sleeper airflow", session)
    assert line.startswith("connection sleeper_default rewritten")
    (conn,) = session.query(Connection).all()
    assert (conn.conn_id, conn.conn_type, conn.extra_dejson) == ("sleeper_default", "sleeper", {"config_home": "/b"})
    assert conn.description.startswith("Written by sleeper airflow at each start")


def test_a_connection_the_user_created_is_kept_saying_so(session: Any) -> None:
    from airflow.models.connection import Connection

    session.add(Connection(conn_id="sleeper_default", conn_type="sleeper", host="prod-db",
                           extra=json.dumps({"object_store_uri": "s3://prod"})))
    line = write_connection("sleeper_default", {"conn_type": "sleeper", "extra": {"config_home": "/a"}},
                            "sleeper airflow", session)
    assert line.startswith("connection sleeper_default kept as it is (not written by sleeper airflow")
    (conn,) = session.query(Connection).all()
    assert conn.host == "prod-db" and conn.extra_dejson == {"object_store_uri": "s3://prod"}


def test_sleeper_cluster_writes_the_connection_its_processes_are_given(session: Any) -> None:
    from airflow.models.connection import Connection

    layout = envs.compose_layout()
    env = envs.process_environment(layout, "worker-1")
    given = json.loads(env[envs.SLEEPER_CONN])
    command = envs.connection_init_command(layout)
    assert command == connection_command(given, "sleeper cluster")
    write_connection(command[1], json.loads(command[2]), command[3], session)
    (conn,) = session.query(Connection).all()
    assert (conn.conn_type, conn.extra_dejson) == ("sleeper", given["extra"])
