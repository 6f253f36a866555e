"""The dated export DAG (issue 22): built only for a table with
``sleeper.table.export.destination``, a run exports the table to the destination
rendered on its data interval, keyed by the table and the date, so running the same
date again answers "already exported" and writes nothing (dag.test() against
PostgreSQL, as in test_dags)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.export_manifest import read_manifest
from sleeper_ops.io.storage import ObjectStore
from tests.integration.test_dags import SCHEMA, _rows, parse_dags, run_dags
from tests.integration.test_dags import sleeper as sleeper
from tests.integration.test_dags import sleeper_home as sleeper_home

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_export_dag_exports_the_runs_date_once_however_often_it_runs(sleeper: Sleeper, sleeper_home: Path,
                                                                     airflow_home: Path, tmp_path: Path) -> None:
    out = tmp_path / "exports"
    table = sleeper.create_table("events", SCHEMA, split_points=["key-050000"], properties={
        "sleeper.table.export.destination": f"{out}/{{{{ data_interval_start | ds }}}}"})
    table.ingest(_rows(500, seed=1))
    sleeper.create_table("plain", SCHEMA)
    parsed = parse_dags(airflow_home, sleeper_home)
    assert "sleeper_events_export" in parsed["dags"] and "sleeper_plain_export" not in parsed["dags"]
    dag = parsed["dags"]["sleeper_events_export"]
    assert dag["timetable"] == "CronDataIntervalTimetable" and dag["schedule"] == "0 0 * * *"
    assert dag["tasks"]["export"]["type"] == "SleeperExportOperator"

    date = {"dag_id": "sleeper_events_export", "logical_date": "2026-01-02T00:00:00+00:00"}
    runs = run_dags(airflow_home, sleeper_home, date, date)
    assert [r["state"] for r in runs.results] == ["success", "success"], runs.logs
    assert "already exported" in runs.logs[1]
    dest = out / "2026-01-01"
    manifest = read_manifest(ObjectStore(str(dest)))
    assert manifest is not None and manifest.export_key == f"{table.info.table_id}/2026-01-01T00:00:00+00:00"
    exported = [r for f in manifest.files for r in pq.read_table(dest / f.key).to_pylist()]
    assert len(exported) == 500 == manifest.rows
    assert Counter(r["value"] for r in exported) == Counter(table.query(ranges=[("", None)])["value"].to_pylist())
    assert sorted(p.name for p in dest.iterdir()) == sorted(["_manifest.json", *(f.key for f in manifest.files)])
    (job,) = table.jobs(kind="export")
    assert job.status == "committed" and job.run_id.startswith("sleeper_events_export/")


def test_the_gc_dag_drops_files_whose_records_have_all_aged_off(sleeper: Sleeper, sleeper_home: Path,
                                                                 airflow_home: Path) -> None:
    """Age-off on a clock: the GC DAG drops, without a rewrite, the files whose age-off
    field (``ts`` here, epoch milliseconds) is past the age in every row."""
    table = sleeper.create_table("events", SCHEMA, split_points=["key-050000"])
    table.ingest(_rows(300, seed=1))  # ts 0..299: long expired, one file shared by both leaves
    fresh = _rows(20, seed=2).set_column(1, "ts", pa.array([4_000_000_000_000] * 20, pa.int64()))
    table.ingest(fresh)
    sleeper.set_properties("events", {"sleeper.table.iterator.ageoff": "ts:86400000"})
    assert table.query(ranges=[("", None)]).num_rows == 20
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_gc", "conf": {"dry_run": False}})
    assert [r["state"] for r in runs.results] == ["success"], runs.logs
    assert "dropped 1 file whose 300 records had all aged off" in runs.logs[0]
    refs = list(table.state().references.values())
    assert len(refs) == 2 and sum(r.record_count for r in refs) == 20  # the fresh file's, one in each leaf
    assert table.query(ranges=[("", None)]).num_rows == 20
