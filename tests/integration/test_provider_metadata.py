"""Provider metadata: the sleeper:// asset URI scheme (sanitizer, OpenLineage
converter), the "Sleeper table" extra link, and the connection test naming the store
that failed."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from psycopg.conninfo import conninfo_to_dict

from sleeper_ops import Sleeper
from sleeper_ops.airflow.assets.sleeper import convert_asset_to_openlineage, sanitize_uri, table_asset
from sleeper_ops.airflow.get_provider_info import get_provider_info
from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.links.sleeper import SleeperTableLink
from sleeper_ops.airflow.operators.compaction import SleeperCompactionOperator
from sleeper_ops.airflow.sensors.visible import SleeperVisibleSensor


@pytest.mark.parametrize("uri", ["sleeper://events", "sleeper://events/", "sleeper://my.table-2/buffer"])
def test_sleeper_asset_uris_pass_the_sanitizer(uri: str) -> None:
    assert sanitize_uri(urlsplit(uri)) == urlsplit(uri)


@pytest.mark.parametrize("uri, why", [
    ("sleeper://", "names a table"), ("sleeper:///events", "names a table"),
    ("sleeper://user:pw@events", "no credentials"), ("sleeper://events:5432", "no credentials or port"),
    ("sleeper://ev..ents", "table name"), ("sleeper://events/files", "only path"),
    ("sleeper://events?x=1", "no query"), ("sleeper://events/buffer#f", "no query or fragment")])
def test_malformed_sleeper_asset_uris_are_refused_saying_why(uri: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        sanitize_uri(urlsplit(uri))


def _connection(monkeypatch: pytest.MonkeyPatch, pg_dsn: str, object_store: str, **extra: str) -> str:
    parts = conninfo_to_dict(pg_dsn)
    monkeypatch.setenv("AIRFLOW_CONN_SLEEPER_DEFAULT", json.dumps({
        "conn_type": "sleeper", "host": parts.get("host"), "port": int(parts.get("port") or 5432),
        "login": parts.get("user"), "password": parts.get("password"), "schema": parts["dbname"],
        "extra": {"object_store_uri": object_store, **extra}}))
    from statestore.postgres import PostgresStateStore

    with PostgresStateStore(pg_dsn) as store:
        return store.instance_id()


def test_the_openlineage_dataset_of_an_asset_is_its_table_in_the_instance_namespace(
        monkeypatch: pytest.MonkeyPatch, pg_dsn: str, tmp_path: Path) -> None:
    instance = _connection(monkeypatch, pg_dsn, str(tmp_path))
    dataset = convert_asset_to_openlineage(table_asset("events"))
    assert (dataset.namespace, dataset.name) == (f"sleeper://{instance}", "events")
    password = conninfo_to_dict(pg_dsn).get("password")
    assert not password or password not in dataset.namespace, "never credentials"


def test_every_sleeper_task_links_to_its_table_page() -> None:
    assert "sleeper_ops.airflow.links.sleeper.SleeperTableLink" in get_provider_info()["extra-links"]
    assert get_provider_info()["asset-uris"][0]["schemes"] == ["sleeper"]
    for op in (SleeperCompactionOperator(task_id="c", table="events"),
               SleeperVisibleSensor(task_id="w", table="events", min_records=1)):
        (link,) = [lk for lk in op.operator_extra_links if isinstance(lk, SleeperTableLink)]
        assert link.name == "Sleeper table"
        assert link.get_link(op, ti_key=None).endswith("/sleeper/ui/tables/events")


def test_connection_test_reaches_both_stores_and_names_the_one_that_failed(
        monkeypatch: pytest.MonkeyPatch, pg_dsn: str, tmp_path: Path) -> None:
    _connection(monkeypatch, pg_dsn, str(tmp_path))
    ok, message = SleeperHook().test_connection()
    assert ok and "0 Sleeper tables" in message, message

    _connection(monkeypatch, pg_dsn, "s3://sleeper-data", endpoint_url="http://127.0.0.1:1", region="us-east-1",
                access_key="a", secret_key="b")
    ok, message = SleeperHook().test_connection()
    assert not ok and message.startswith("object store s3://sleeper-data unreachable"), message

    def lost(self: Sleeper) -> None:
        raise OSError("connection refused")

    monkeypatch.setattr(Sleeper, "tables", lost)
    ok, message = SleeperHook().test_connection()
    assert not ok and message == "state store unreachable: connection refused", message


def _task_context() -> dict:
    import datetime
    import types

    ts = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    run = types.SimpleNamespace(dag_id="d", run_id="r", logical_date=ts, run_after=ts, clear_number=0, conf={})
    ti = types.SimpleNamespace(dag_id="d", task_id="import", try_number=1, map_index=-1, logical_date=ts,
                               dag_run=run, run_id="r")
    ti.get_template_context = lambda: {"dag_run": run, "ti": ti}
    return {"ti": ti, "dag_run": run}


def test_spark_jobs_get_the_openlineage_parent_only_when_switched_on(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow.providers.common.compat.sdk import conf

    from sleeper_ops.airflow.utils.openlineage import spark_lineage_conf

    assert spark_lineage_conf(_task_context()) == {}, "off by default, as in the apache-spark provider"
    monkeypatch.setattr(conf, "getboolean", lambda section, key, fallback=False: key == "spark_inject_parent_job_info")
    props = spark_lineage_conf(_task_context())
    assert props["spark.openlineage.parentJobName"] == "d.import"
    assert props["spark.openlineage.rootParentJobName"] == "d" and props["spark.openlineage.parentRunId"]


def _home(where: Path, dsn: str) -> Path:
    where.mkdir()
    (where / "sleeper.toml").write_text(f'[state_store]\nbackend = "postgres"\ndsn = "{dsn}"\n')
    return where


def test_two_spellings_of_one_database_and_two_homes_on_it_share_one_lineage_namespace(
        pg_dsn: str, tmp_path: Path) -> None:
    """A socket path as a URI's ``host`` parameter and as a keyword, each from a home of its
    own: one namespace, the store's id (the DSN once named them ``localhost:5432`` and
    ``<socket dir>``: two namespaces, and every embedded home's socket the same one)."""
    from psycopg.conninfo import make_conninfo

    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.instance import config_namespace, forget_namespaces
    from statestore.postgres import PostgresStateStore

    parts = conninfo_to_dict(pg_dsn)
    keywords = make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
    uri = f"postgresql://{parts.get('user', 'postgres')}@/{parts['dbname']}?host={parts.get('host', '')}"
    assert keywords != uri
    with PostgresStateStore(pg_dsn) as store:
        expected = f"sleeper://{store.instance_id()}"
    forget_namespaces()
    seen = {config_namespace(SleeperConfig.load(_home(tmp_path / name, dsn), create=False))
            for name, dsn in (("a", keywords), ("b", uri), ("c", keywords))}
    assert seen == {expected}


def test_the_connection_the_clusters_workers_get_names_the_same_instance(
        monkeypatch: pytest.MonkeyPatch, pg_dsn: str, tmp_path: Path) -> None:
    """``sleeper cluster`` gives its workers ``sleeper_default`` as host, login, database
    (:func:`sleeper_ops.cluster.environment.sleeper_connection`): pointed at a database,
    their lineage namespace is the one a home on that database's DSN gives."""
    from dataclasses import replace

    from sleeper_ops.cluster.environment import (
        AWS_CONN,
        SLEEPER_CONN,
        WORKER_ROLES,
        PostgresAddress,
        compose_layout,
        process_environment,
    )
    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.instance import config_namespace, forget_namespaces

    parts = conninfo_to_dict(pg_dsn)
    layout = replace(compose_layout(), state_store="postgres", postgres=PostgresAddress(
        host=str(parts["host"]), port=int(parts["port"]) if parts.get("port") else None,
        login=str(parts.get("user") or "postgres"), password=str(parts.get("password") or ""),
        database=str(parts["dbname"])))
    worker = process_environment(layout, WORKER_ROLES[0])
    monkeypatch.setenv("AIRFLOW_CONN_SLEEPER_DEFAULT", worker[SLEEPER_CONN])
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", worker[AWS_CONN])
    forget_namespaces()
    from_home = config_namespace(SleeperConfig.load(_home(tmp_path / "home", pg_dsn), create=False))
    forget_namespaces()
    assert convert_asset_to_openlineage(table_asset("events")).namespace == from_home
