"""OpenLineage of each kind of Sleeper task (:mod:`sleeper_ops.airflow.utils.openlineage`):
the table as ``sleeper://<instance id>`` (the state store's own id, never a parsed DSN),
the user's source and destination files, never the table's internal Parquet files, and
column lineage for imports and exports."""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("airflow.providers.openlineage")

from sleeper_ops.airflow.operators.compaction import SleeperCompactionOperator
from sleeper_ops.airflow.operators.export import SleeperExportOperator
from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
from sleeper_ops.airflow.operators.maintenance import SleeperFlushOperator, SleeperGcOperator, SleeperSplitOperator
from sleeper_ops.airflow.utils.openlineage import note, operator_lineage
from sleeper_ops.instance import config_namespace, forget_namespaces, namespace
from tests.unit.sleeper_ops.operator_runner import execute_task

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}
FIELDS = ["key", "n"]


def _file(path: Path, first: int, n: int = 10) -> str:
    pq.write_table(pa.table({"key": [f"k{i:04d}" for i in range(first, first + n)],
                             "n": pa.array(range(first, first + n), pa.int64())}), path)
    return str(path)


def _facets(operator: Any) -> Any:
    return operator.get_openlineage_facets_on_complete(None)


def _names(datasets: Any) -> list[tuple[str, str]]:
    return [(d.namespace, d.name) for d in datasets]


@pytest.fixture
def table(sleeper: Any) -> Any:
    return sleeper.create_table("events", SCHEMA, properties={"sleeper.table.compaction.strategy": "basic"})


@pytest.fixture
def ns(sleeper: Any) -> str:
    return f"sleeper://{sleeper.state_store.instance_id()}"


def test_the_namespace_is_the_state_stores_instance_id(sleeper: Any, ns: str) -> None:
    assert namespace(sleeper.state_store) == ns
    other = SimpleNamespace(instance_id=lambda: "another")
    assert namespace(other) == "sleeper://another", "an in-memory store is never taken from the cache"


def test_ingest_reads_the_users_files_and_writes_the_table_column_for_column(
        sleeper: Any, table: Any, ns: str, tmp_path: Path) -> None:
    files = [_file(tmp_path / "a.parquet", 0), _file(tmp_path / "b.parquet", 100)]
    op = SleeperIngestOperator(task_id="ingest", table="events", files=files)
    execute_task(op, sleeper)
    lineage = _facets(op)
    assert _names(lineage.inputs) == [("file", f) for f in files]
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == (ns, "events")
    assert out.outputFacets["outputStatistics"].rowCount == 20
    columns = out.facets["columnLineage"].fields
    assert sorted(columns) == FIELDS
    for name, field in columns.items():
        assert [(i.namespace, i.name, i.field) for i in field.inputFields] == [("file", f, name) for f in files]
        assert field.transformationType == "IDENTITY"


@pytest.mark.parametrize("kind", ["compaction", "split", "gc"])
def test_maintenance_reads_and_writes_the_table_never_its_files(
        sleeper: Any, table: Any, ns: str, tmp_path: Path, kind: str) -> None:
    for i in range(3):
        table.ingest([_file(tmp_path / f"{i}.parquet", i * 100)])
    op = {"compaction": lambda: SleeperCompactionOperator(task_id="c", table="events", runner="local"),
          "split": lambda: SleeperSplitOperator(task_id="split", table="events"),
          "gc": lambda: SleeperGcOperator(task_id="gc", table="events")}[kind]()
    execute_task(op, sleeper)
    lineage = _facets(op)
    assert _names(lineage.inputs) == [(ns, "events")], "the table, not its 3 data files"
    assert _names(lineage.outputs) == [(ns, "events")]
    assert "columnLineage" not in lineage.outputs[0].facets
    if kind == "compaction":
        assert lineage.outputs[0].outputFacets["outputStatistics"].rowCount == 30


def test_a_flush_reads_and_writes_the_table(sleeper: Any, table: Any, ns: str) -> None:
    table.write([{"key": "a", "n": 1}, {"key": "b", "n": 2}])
    op = SleeperFlushOperator(task_id="flush", table="events")
    execute_task(op, sleeper)
    lineage = _facets(op)
    assert (_names(lineage.inputs), _names(lineage.outputs)) == ([(ns, "events")], [(ns, "events")])


def test_export_reads_the_table_and_writes_the_users_destination_column_for_column(
        sleeper: Any, table: Any, ns: str, tmp_path: Path) -> None:
    table.ingest([_file(tmp_path / "in.parquet", 0)])
    dest = tmp_path / "out"
    op = SleeperExportOperator(task_id="export", table="events", destination=str(dest))
    execute_task(op, sleeper)
    lineage = _facets(op)
    assert _names(lineage.inputs) == [(ns, "events")]
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == ("file", str(dest)), "the destination, not the table"
    columns = out.facets["columnLineage"].fields
    assert {n: [(i.namespace, i.name, i.field) for i in f.inputFields] for n, f in columns.items()} == {
        n: [(ns, "events", n)] for n in FIELDS}


def test_bulk_import_reads_the_users_sources_and_writes_the_table(sleeper: Any, table: Any, ns: str) -> None:
    """What the bulk import operator notes (``_report``): its sources and the table."""
    lineage = operator_lineage(note(sleeper, "events", inputs=["s3://bucket/in/"], column_lineage=True, rows=5))
    assert _names(lineage.inputs) == [("s3://bucket", "in/")]
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == (ns, "events")
    assert [(i.namespace, i.name) for i in out.facets["columnLineage"].fields["key"].inputFields] == [
        ("s3://bucket", "in/")]


def test_a_store_without_an_id_logs_one_line_and_the_task_goes_on(
        sleeper: Any, table: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from statestore.errors import StateStoreUnavailableError

    def refuse() -> str:
        raise StateStoreUnavailableError("no instance id here\nsecond line")

    monkeypatch.setattr(sleeper.state_store, "instance_id", refuse)
    path = _file(tmp_path / "a.parquet", 0)
    op = SleeperIngestOperator(task_id="ingest", table="events", files=[path])
    with caplog.at_level(logging.WARNING):
        result = execute_task(op, sleeper)
    assert result["records"] == 10 and table.query(ranges=[("", None)]).num_rows == 10
    lineage = _facets(op)
    assert _names(lineage.inputs) == [("file", path)] and lineage.outputs == [], "no namespace invented"
    (line,) = [r.getMessage() for r in caplog.records if "OpenLineage" in r.getMessage()]
    assert "no instance id here" in line and "second line" not in line


def test_the_namespace_of_a_configuration_is_asked_once_per_process(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two homes on one store address share the cached namespace; the store is opened once."""
    from sleeper_ops.config import SleeperConfig

    forget_namespaces()
    opened: list[str] = []

    class Store:
        def instance_id(self) -> str:
            return "1d5e9a3c-0000-4000-8000-000000000001"

        def __enter__(self) -> Any:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def fake_open(kind: str, **options: Any) -> Any:
        opened.append(kind)
        return Store()

    monkeypatch.setattr("statestore.backends.open_state_store", fake_open)
    config = SleeperConfig.load(tmp_path / "home")
    try:
        assert config_namespace(config) == config_namespace(config) == "sleeper://1d5e9a3c-0000-4000-8000-000000000001"
        assert len(opened) == 1
    finally:
        forget_namespaces()
