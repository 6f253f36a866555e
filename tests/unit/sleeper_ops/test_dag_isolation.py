"""One table never breaks another's DAGs: the DAG files, parsed by a real ``DagBag``, load
every table they can build; a table they cannot build (a name Airflow refuses, a property
the build raises on) is the file's import error, naming the table and the reason.

The catalog is handed to the factory directly (no state store): what is under test is
what Airflow's own parse makes of the DAG files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sleeper_ops.orchestration import dag_factory
from statestore.catalog import TableInfo
from statestore.schema import Schema

REPO = Path(__file__).resolve().parents[3]
DAGS = REPO / "dags"
OPERATIONS = ("split", "compaction", "gc", "ingest_batcher", "flush")
SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "valueFields": [{"name": "value", "type": "StringType"}]})
#: A name from before names were limited to what Airflow's tags take (100 characters with ``table:``).
LONG = "t" * 150


def _table(name: str, **properties: str) -> TableInfo:
    return TableInfo(table_id=f"id-{abs(hash(name)):x}", name=name, schema=SCHEMA, properties=dict(properties))


@pytest.fixture
def catalog(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[TableInfo]:
    """The tables the DAG files see (appended by the test)."""
    tables: list[TableInfo] = []
    monkeypatch.setattr(dag_factory, "catalog_source", lambda operation: tmp_path)
    monkeypatch.setattr(dag_factory, "read_catalog", lambda source, **_: list(tables))
    return tables


def _parse() -> Any:
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS), safe_mode=True)


def test_finding_1_a_table_name_airflow_refuses_no_longer_removes_every_tables_dags(catalog) -> None:
    catalog += [_table("events"), _table(LONG)]
    bag = _parse()
    assert sorted(bag.dags) == sorted(f"sleeper_events_{op}" for op in OPERATIONS)
    assert sorted(Path(f).name for f in bag.import_errors) == sorted(f"sleeper_{op}.py" for op in OPERATIONS)
    for error in bag.import_errors.values():
        assert f"table {LONG!r} has a name outside the rule (a table name is 1 to 94 " in error, error
        assert f"sleeper table rename {LONG} NEW_NAME" in error, error


def test_a_table_whose_build_raises_is_reported_and_the_others_load(catalog, monkeypatch) -> None:
    catalog += [_table("events"), _table("broken"), _table("logs")]
    real = dag_factory.schedule_of

    def schedule_of(table: TableInfo, operation: str) -> Any:
        if table.name == "broken":
            raise ValueError("no schedule for you")
        return real(table, operation)

    monkeypatch.setattr(dag_factory, "schedule_of", schedule_of)
    bag = _parse()
    assert sorted(bag.dags) == sorted(f"sleeper_{t}_{op}" for t in ("events", "logs") for op in OPERATIONS)
    assert sorted(Path(f).name for f in bag.import_errors) == sorted(f"sleeper_{op}.py" for op in OPERATIONS)
    for error in bag.import_errors.values():
        assert "table 'broken'" in error and "ValueError: no schedule for you" in error, error


def test_a_property_airflow_refuses_only_when_bagging_is_reported_with_its_table(catalog) -> None:
    """A cron Airflow checks only when it bags the DAG (``timetable.validate()``), from a
    table written before schedules were checked: named with its table, not bare."""
    catalog += [_table("events"), _table("weekly", **{"sleeper.table.schedule.gc": "every tuesday"})]
    bag = _parse()
    assert "sleeper_events_gc" in bag.dags and "sleeper_weekly_split" in bag.dags
    assert [Path(f).name for f in bag.import_errors] == ["sleeper_gc.py"]
    error = next(iter(bag.import_errors.values()))
    assert "table 'weekly': its gc DAG cannot be built: AirflowTimetableInvalid: " in error, error


def test_every_unbuildable_table_of_a_file_is_named_in_its_one_import_error(catalog) -> None:
    catalog += [_table(LONG), _table("bad name"), _table("fine")]
    bag = _parse()
    assert sorted(bag.dags) == sorted(f"sleeper_fine_{op}" for op in OPERATIONS)
    error = next(e for f, e in bag.import_errors.items() if f.endswith("sleeper_gc.py"))
    assert "2 tables" in error and f"table {LONG!r}" in error and "table 'bad name'" in error, error


def test_a_file_with_every_table_buildable_has_no_import_error(catalog) -> None:
    catalog += [_table("events"), _table("logs", **{"sleeper.table.bulk.import.source": "s3://raw/{{ ds }}/"})]
    bag = _parse()
    assert bag.import_errors == {}
    assert len(bag.dags) == 2 * len(OPERATIONS) + 1


def test_the_status_page_learns_a_tables_dag_problem_from_the_same_build() -> None:
    assert dag_factory.table_dags_problem(_table("events")) is None
    problem = dag_factory.table_dags_problem(_table(LONG))
    assert problem is not None and f"table {LONG!r} has a name outside the rule (a table name is 1 to 94 " in problem
