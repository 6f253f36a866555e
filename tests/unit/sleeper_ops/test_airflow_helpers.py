"""Pure helpers of the Airflow wiring: DAG ids, schedules, the standalone environment."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sleeper_ops.airflow.task_runner import chosen_runner, configured_home
from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.orchestration.dag_factory import dag_id_for, schedule_of, table_name_of
from sleeper_ops.orchestration.standalone import airflow_environment, port_free, spark_connection, sqlalchemy_url
from statestore.catalog import TableInfo
from statestore.schema import Schema

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "LongType"}]})


@pytest.mark.parametrize("table", ["events", "x_compaction", "a_gc_b", "t.1-2"])
@pytest.mark.parametrize("operation", ["split", "compaction", "gc", "ingest_batcher"])
def test_dag_ids_round_trip(table: str, operation: str) -> None:
    dag_id = dag_id_for(table, operation)
    assert dag_id == f"sleeper_{table}_{operation}"
    assert table_name_of(dag_id, operation) == table


def test_foreign_dag_ids_name_no_table() -> None:
    assert table_name_of("someone_elses_dag", "gc") is None
    assert table_name_of("sleeper_events_gc", "split") is None
    assert table_name_of("sleeper__gc", "gc") is None


def test_schedules_come_from_properties() -> None:
    info = TableInfo("id", "t", SCHEMA, {"sleeper.table.schedule.gc": "none", "sleeper.table.schedule.split": "@daily"})
    assert schedule_of(info, "gc") is None
    assert schedule_of(info, "split") == "@daily"
    assert schedule_of(info, "compaction") == "*/5 * * * *"  # the default


def test_runner_param_overrides_the_table_property() -> None:
    assert chosen_runner("spark", None) == "spark"
    assert chosen_runner("spark", {"runner": "local"}) == "local"
    assert chosen_runner(None, {}) == "local"
    with pytest.raises(ConfigError, match="unknown compaction runner 'yarn'"):
        chosen_runner("local", {"runner": "yarn"})


def test_configured_home_never_creates_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLEEPER_HOME", raising=False)
    with pytest.raises(ConfigError, match="SLEEPER_HOME is not set"):
        configured_home()
    monkeypatch.setenv("SLEEPER_HOME", str(tmp_path / "h"))
    with pytest.raises(ConfigError, match="has no sleeper.toml"):
        configured_home()
    assert not (tmp_path / "h").exists()
    (tmp_path / "h").mkdir()
    (tmp_path / "h" / "sleeper.toml").write_text("")
    assert configured_home() == tmp_path / "h"


def test_metadata_url_uses_psycopg3_and_the_same_server() -> None:
    assert sqlalchemy_url("postgresql://postgres:@/sleeper?host=/tmp/pg", "airflow") == \
        "postgresql+psycopg://postgres@/airflow?host=/tmp/pg"
    assert sqlalchemy_url("host=db port=5433 user=u password=p@ss dbname=sleeper sslmode=require", "airflow") == \
        "postgresql+psycopg://u:p%40ss@db:5433/airflow?sslmode=require"


def test_standalone_environment_binds_loopback_and_shares_the_state_store(tmp_path: Path) -> None:
    config = SleeperConfig.from_dict(tmp_path, {"spark": {"master": "local[2]"}})
    env = airflow_environment(config, state_dsn="postgresql:///sleeper", metadata_url="postgresql+psycopg:///airflow",
                              port=18099, base={"PATH": "/usr/bin"})
    assert env["AIRFLOW__API__HOST"] == "127.0.0.1" and env["AIRFLOW__API__PORT"] == "18099"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:18099/execution/"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW_HOME"] == str(tmp_path / "airflow")
    assert env["SLEEPER_HOME"] == str(tmp_path) and env["SLEEPER_STATE_STORE_DSN"] == "postgresql:///sleeper"
    assert env["AIRFLOW__CORE__DAGS_FOLDER"].endswith("dags")
    assert env["AIRFLOW_CONN_SLEEPER_SPARK"] == spark_connection("local[2]") == \
        '{"conn_type": "spark", "host": "local[2]"}'
    assert env["PATH"].endswith("/usr/bin")


def test_port_free_sees_a_listener() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not port_free(s.getsockname()[1])


def test_users_are_checked_and_normalised_for_simple_auth_manager():
    from sleeper_ops.orchestration.users import parse_users

    assert parse_users("admin:Admin, viewer:Viewer,ops:OP") == "admin:admin,viewer:viewer,ops:op"
    for bad, why in [("admin:admin,bob", "'bob' is not NAME:ROLE"), ("admin:admin,bob:boss", "'bob:boss'"),
                     ("admin:admin,admin:viewer", "named twice"), ("viewer:viewer", "must include admin:admin")]:
        with pytest.raises(ConfigError, match=why):
            parse_users(bad)


def test_the_users_reach_airflow_and_every_password_is_printed(tmp_path):
    from sleeper_ops.orchestration.standalone import airflow_environment
    from sleeper_ops.orchestration.users import PASSWORDS_FILE, USERS_VARIABLE, other_users_line

    config = SleeperConfig.load(tmp_path)
    env = airflow_environment(config, state_dsn="host=x", metadata_url="postgresql+psycopg://x/airflow", port=8080,
                              base={USERS_VARIABLE: "admin:admin"}, users="admin:admin,viewer:viewer")
    assert env[USERS_VARIABLE] == "admin:admin,viewer:viewer"
    kept = airflow_environment(config, state_dsn="host=x", metadata_url="u", port=8080, base={USERS_VARIABLE: "a:b"})
    assert kept[USERS_VARIABLE] == "a:b", "without --users the environment's setting stands"
    assert other_users_line(tmp_path, "admin") == ""
    (tmp_path / PASSWORDS_FILE).write_text('{"admin": "p1", "viewer": "p2", "ops": "p3"}')
    assert other_users_line(tmp_path, "admin") == \
        f"other users: viewer password p2; ops password p3 (in {tmp_path / PASSWORDS_FILE})"


def test_the_airflow_settings_are_written_to_airflow_cfg_keeping_the_others(tmp_path):
    import configparser

    from sleeper_ops.orchestration.standalone import write_airflow_cfg

    (tmp_path / "airflow.cfg").write_text("[core]\ndags_folder = /old\nfernet_key = kept\n[webserver]\nx = 1\n")
    path = write_airflow_cfg(tmp_path, {"AIRFLOW__CORE__DAGS_FOLDER": "/repo/dags", "AIRFLOW_HOME": str(tmp_path),
                                        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql+psycopg://u:p%2F@h/airflow",
                                        "SLEEPER_HOME": "/s", "PATH": "/bin"})
    cfg = configparser.ConfigParser()  # Airflow reads it with % interpolation
    cfg.read(path)
    assert cfg.get("core", "dags_folder") == "/repo/dags" and cfg.get("core", "fernet_key") == "kept"
    assert cfg.get("database", "sql_alchemy_conn") == "postgresql+psycopg://u:p%2F@h/airflow"
    assert cfg.get("webserver", "x") == "1" and not cfg.has_option("core", "home")
    assert path.stat().st_mode & 0o077 == 0, "it holds the database URL: the owner's only"


def test_the_dated_dag_starts_at_the_tables_import_start_so_no_past_interval_runs_by_itself():
    from datetime import UTC, datetime, timedelta

    from sleeper_ops.orchestration.dag_factory import build_dag

    start = datetime.now(UTC).replace(second=0, microsecond=0)  # the source set just now
    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    table = TableInfo("tid", "events", schema, {"sleeper.table.bulk.import.source": "/raw/{{ ds }}/",
                                                "sleeper.table.bulk.import.start": start.isoformat()})
    dag = build_dag(table, "bulk_import")
    assert dag.timetable.start == start and dag.catchup, "scheduled from the start, no interval skipped"
    first = dag.timetable.next_dagrun_info(last_automated_data_interval=None, restriction=_restriction(dag))
    midnight = start.replace(hour=0, minute=0)
    expected = midnight if midnight == start else midnight + timedelta(days=1)
    assert first is not None and first.data_interval.start == expected, \
        "the first interval at or after the start, not yesterday's"


def _restriction(dag):  # type: ignore[no-untyped-def]
    """The scheduler's restriction of ``dag`` (as Airflow's ``SerializedDAG._time_restriction``)."""
    from airflow.timetables.base import TimeRestriction

    earliest = min([dag.start_date, *(t.start_date for t in dag.tasks if t.start_date)])
    return TimeRestriction(earliest=earliest, latest=None, catchup=dag.catchup)

def test_the_hook_reads_aws_settings_through_the_amazon_providers_aws_base_hook(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker with no Sleeper files: sleeper_default names DynamoDB, aws_default holds the
    region, endpoint and keys; DAG parsing reads the catalog from the connection."""
    import json

    from sleeper_ops.airflow.hooks.sleeper import SleeperHook, aws_settings
    from sleeper_ops.orchestration.dag_factory import catalog_source

    monkeypatch.delenv("SLEEPER_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps({
        "conn_type": "aws", "login": "AKEY1", "password": "SKEY1",
        "extra": {"region_name": "eu-west-2", "endpoint_url": "http://127.0.0.1:5999"}}))
    monkeypatch.setenv("AIRFLOW_CONN_SLEEPER_DEFAULT", json.dumps({
        "conn_type": "sleeper", "extra": {"state_store": "dynamodb", "object_store_uri": "s3://sleeper-data/data"}}))
    assert aws_settings("aws_default") == {"region": "eu-west-2", "endpoint_url": "http://127.0.0.1:5999",
                                           "access_key": "AKEY1", "secret_key": "SKEY1"}
    config = SleeperHook().get_config()
    assert config.state_store_backend == "dynamodb" and config.dynamodb.endpoint_url == "http://127.0.0.1:5999"
    assert config.s3 is not None and config.s3.access_key == "AKEY1"
    assert catalog_source("split") == config


@pytest.mark.parametrize("template", [
    "s3://raw/{{ data_interval_start | ds }}/", "{{ ds_nodash }}/{{ ts_nodash }}/{{ ts_nodash_with_tz }}",
    "{{ data_interval_end | ts }}", "{{ data_interval_start.add(days=1).strftime('%Y/%m') }}",
    "{% do params.update({'x': 1}) %}{{ params.x }}", "{{ macros.ds_add(ds, 3) }}",
])
def test_a_template_checked_when_set_renders_as_the_dated_dag_renders_it(template: str) -> None:
    """The set-time check (sleeper_ops.bulk_import.templates) renders what the dated DAG's
    own Jinja environment renders, on the same context."""
    from sleeper_ops.bulk_import.templates import render, sample_context
    from sleeper_ops.orchestration.dag_factory import build_dag

    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    dag = build_dag(TableInfo("tid", "events", schema, {"sleeper.table.bulk.import.source": template}), "bulk_import")
    airflow_env = dag.get_template_env()
    assert render(template, sample_context()) == airflow_env.from_string(template).render(**sample_context())


@pytest.mark.parametrize("template", ["{{ data_interval_start | dss }}", "{{ data_interval_begin }}", "{{ ds ",
                                      "{{ params.day }}"])
def test_a_template_refused_when_set_fails_in_the_dated_dags_environment_too(template: str) -> None:
    import jinja2

    from sleeper_ops.bulk_import.templates import check_templates, sample_context
    from sleeper_ops.orchestration.dag_factory import build_dag

    with pytest.raises(ConfigError):
        check_templates("events", {"sleeper.table.bulk.import.source": template})
    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    dag = build_dag(TableInfo("tid", "events", schema, {"sleeper.table.bulk.import.source": "/x"}), "bulk_import")
    with pytest.raises(jinja2.TemplateError):
        dag.get_template_env().from_string(template).render(**sample_context())


@pytest.mark.parametrize("properties, seconds", [({}, 120), ({"sleeper.table.dated.retry.delay.seconds": "5"}, 5)])
def test_a_dated_dags_tasks_retry_after_the_tables_retry_delay(properties: dict[str, str], seconds: int) -> None:
    from datetime import timedelta

    from sleeper_ops.orchestration.dag_factory import build_dag

    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    dag = build_dag(TableInfo("tid", "events", schema, {"sleeper.table.bulk.import.source": "/raw/{{ ds }}/",
                                                        **properties}), "bulk_import")
    assert {t.task_id: (t.retries, t.retry_delay) for t in dag.tasks}["bulk_import"] == (2, timedelta(seconds=seconds))
