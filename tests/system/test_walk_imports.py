"""Issue 34's walk, the bulk import part: each finding a user met, as the user meets it,
in process on the in-memory state store (a local stand-in runs the import where Spark
would), so each case takes well under a second.

* finding 2: a tiny bulk import into a new table splits it only as far as its rows justify;
* finding 3: after pre-splits, the counts a report, the metrics and the status page show
  are the counts a query finds, or say they are approximate;
* finding 4: a dated import's first scheduled run is the first interval at or after its
  start, and a manual run (or backfill) of a date before the start imports that date;
* finding 8 (bulk import): on a standing Spark service, ``sleeper bulk-import t
  bulk.parquet`` (a relative path) imports the file, and says where it runs.
"""

from __future__ import annotations

import dataclasses
import os
import re
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.bulk_import.job import bulk_import
from sleeper_ops.config import SleeperConfig
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.metrics import table_metrics
from sleeper_ops.web.metrics import render as render_metrics
from sleeper_ops.web.status_render import TableSummary, render_index, render_table
from statestore.catalog import TableInfo
from statestore.memory import InMemoryStateStore
from statestore.schema import Schema
from tests.unit.sleeper_ops.cli_runner import run_cli
from tests.unit.sleeper_ops.test_bulk_import_job import SCHEMA, local_runner

SERVICE = "http://127.0.0.1:8998"


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[Sleeper]:
    """The in-memory state store over a local object store."""
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    yield s
    s.close()


def _rows_file(path: Path, keys: range) -> str:
    pq.write_table(pa.table({"key": pa.array(keys, pa.int64()), "v": [f"v{k}" for k in keys]}), path)
    return str(path)


def _leaves(sleeper: Sleeper, table: str) -> int:
    return sum(1 for p in sleeper.table(table).state().partitions.values() if p.is_leaf)


@pytest.mark.parametrize("rows", [100, 3])
def test_finding_2_a_tiny_bulk_import_into_a_new_table_splits_nothing(sleeper: Sleeper, tmp_path: Path,
                                                                      rows: int) -> None:
    """Before: 100 rows into a new table: "committed 100 records ... into 64 files; 63
    pre-splits" (3 rows: 3 leaves). Now no leaf is made for fewer than
    sleeper.table.bulk.import.min.rows.per.leaf (1,000,000) rows: one file, one leaf."""
    t = sleeper.create_table("t", SCHEMA)
    r = bulk_import(sleeper.state_store, sleeper.objects, t.info, [_rows_file(tmp_path / "in.parquet", range(rows))],
                    run=local_runner(sleeper), import_key="day-1")
    assert r.summary().startswith(f"t: bulk import 'day-1' committed {rows} records from 1 files into 1 files"), \
        r.summary()
    assert r.presplits == 0 and _leaves(sleeper, "t") == 1
    assert t.query(ranges=[(-(2**63), None)]).num_rows == rows


@pytest.fixture
def on_cluster(tmp_path: Path) -> Iterator[Sleeper]:
    """A Sleeper configured as ``sleeper cluster`` leaves it: bulk imports go to the
    Spark service (``[spark] service``)."""
    config = dataclasses.replace(SleeperConfig.load(tmp_path / "home"), spark_service=SERVICE)
    s = Sleeper(config=config, state_store=InMemoryStateStore(), objects=ObjectStore(config.object_store_uri))
    yield s
    s.close()


def _total(text: str, before: str = "", after: str = " ?records") -> tuple[int, bool]:
    """The first ``N`` or ``N~`` between ``before`` and ``after`` in ``text``: (N, marked approximate)."""
    m = re.search(f"{before}(?:<span[^>]*>)?([0-9,]+)(~?)(?:</span>)?{after}", text)  # the page's tooltip
    assert m, text[:2000]
    return int(m.group(1).replace(",", "")), m.group(2) == "~"


def test_finding_3_counts_after_pre_splits_are_exact_or_say_they_are_not(sleeper: Sleeper, tmp_path: Path,
                                                                        monkeypatch: Any, capsys: Any) -> None:
    """Before: after pre-split imports and compactions, `sleeper report partitions`, the
    metric and the status page said 7 records where a query found 8, a leaf showed
    `records=0~`, and no total said it was approximate. Files referenced from a split
    partition are pushed down with estimated counts (half each side); compaction makes
    a leaf's count exact, but a leaf holding one such file is never compacted. Now every
    total equals the records a query finds or is marked approximate (`~`, and the
    metric sleeper_records_approximate is 1)."""
    t = sleeper.create_table("t", SCHEMA, properties={"sleeper.table.bulk.import.min.rows.per.leaf": "1",
                                                      "sleeper.table.compaction.strategy": "basic",
                                                      "sleeper.table.compaction.files.batch.size": "2"})
    for day, keys in (("d1", range(1, 5)), ("d2", range(5, 9))):  # two daily imports of 4 rows
        bulk_import(sleeper.state_store, sleeper.objects, t.info, [_rows_file(tmp_path / f"{day}.parquet", keys)],
                    run=local_runner(sleeper), import_key=day)
    for _ in range(4):
        t.compact()
    queried = t.query(ranges=[(-(2**63), None)]).num_rows
    assert queried == 8

    code, out, err = run_cli(sleeper, monkeypatch, capsys, "report", "partitions", "t")
    assert code == 0, err
    reported = {"report": _total(out.splitlines()[0])}
    m = table_metrics(sleeper.state_store, t.info)
    metrics = render_metrics({"t": m}).decode()
    reported["metric"] = (_total(metrics, 'sleeper_records{table="t"} ', r"\.0")[0],
                          'sleeper_records_approximate{table="t"} 1.0' in metrics)
    overview = sleeper.state_store.overview(t.info.table_id)
    summary = TableSummary.of(t.info, overview, [])
    reported["status page"] = _total(render_table(t.info, overview, []), "<b>", "</b>records")
    reported["status index"] = _total(render_index([summary]), "<td class='num'>", "</td><td>none")
    for where, (count, approximate) in reported.items():
        assert count == queried or approximate, f"{where}: {count} records, not marked approximate; a query finds " \
                                                f"{queried}"


def _service_elsewhere(sleeper: Sleeper, cwd: Path, seen: list[dict[str, Any]]) -> Any:
    """A stand-in for the Spark service: it runs the request's import in a working
    directory of its own (``cwd``), as the service process does, and answers as it does."""
    def run_on_service(service: str, request: dict[str, Any], *, timeout: Any = None) -> dict[str, Any]:
        seen.append(request)
        here = os.getcwd()
        os.chdir(cwd)
        try:
            info = sleeper.state_store.get_table(request["table"])
            r = bulk_import(sleeper.state_store, sleeper.objects, info, request["sources"],
                            run=local_runner(sleeper), import_key=request["import_key"])
            return {"state": "succeeded", "outcome": {"result": dataclasses.asdict(r)}}
        except Exception as e:  # the service reports a failed job with its reason
            return {"state": "failed", "error": f"{type(e).__name__}: {e}"}
        finally:
            os.chdir(here)
    return run_on_service


def test_finding_8_a_relative_bulk_import_path_on_the_spark_service(on_cluster: Sleeper, tmp_path: Path,
                                                                   monkeypatch: Any, capsys: Any) -> None:
    """Before: ``sleeper bulk-import t bulk.parquet`` on ``sleeper cluster`` failed with
    "bulk.parquet: no input files ... found" (the service looked in its own directory),
    after printing "starting spark-submit". Now the path is resolved where the command
    runs, and the command says the job goes to the Spark service."""
    import sleeper_ops.spark.service_client as client

    on_cluster.create_table("t", SCHEMA)
    work, service_dir = tmp_path / "work", tmp_path / "service"
    work.mkdir()
    service_dir.mkdir()
    pq.write_table(pa.table({"key": pa.array(range(10), pa.int64()), "v": ["x"] * 10}), work / "bulk.parquet")
    seen: list[dict[str, Any]] = []
    monkeypatch.setattr(client, "run_on_service", _service_elsewhere(on_cluster, service_dir, seen))
    monkeypatch.chdir(work)

    code, out, err = run_cli(on_cluster, monkeypatch, capsys, "bulk-import", "t", "bulk.parquet")

    assert code == 0, err
    assert "committed 10 records" in out
    assert seen[0]["sources"] == [str(work / "bulk.parquet")], "the caller's path, made absolute"
    assert f"on the Spark service at {SERVICE}" in err and "spark-submit" not in err, err


def test_finding_4_a_dated_import_runs_from_its_start_and_a_manual_run_before_it_imports_its_date() -> None:
    """Before: with sleeper.table.bulk.import.start in the past the first scheduled run was
    yesterday's interval (catchup=False skipped every date since the start), and `airflow
    dags test sleeper_t_bulk_import <a date before the start>` ended success with no task
    (Airflow makes no task instance before a task's start date). Now the DAG, as the
    scheduler holds it (serialized), runs the first interval at or after the start and
    every one after it, and a manual run or a backfill of an earlier date has its tasks."""
    from airflow.serialization.serialized_objects import DagSerialization

    from sleeper_ops.orchestration.dag_factory import build_dag

    schema = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    table = TableInfo("tid", "t", schema, {"sleeper.table.bulk.import.source": "/raw/{{ ds }}/",
                                           "sleeper.table.bulk.import.start": "2026-01-01"})
    dag = DagSerialization.from_dict(DagSerialization.to_dict(build_dag(table, "bulk_import")))

    first = dag.next_dagrun_info(last_automated_run_info=None)
    assert first is not None and first.data_interval.start.date() == date(2026, 1, 1), \
        f"the first scheduled interval starts {first and first.data_interval.start}, not at the start"
    second = dag.next_dagrun_info(last_automated_run_info=first)
    assert second is not None and second.data_interval.start.date() == date(2026, 1, 2), "no interval skipped"

    before_start = datetime(2025, 12, 15, tzinfo=UTC)  # the logical date of a manual run before the start
    created = [task.task_id for task in dag.tasks if task.start_date is None or task.start_date <= before_start]
    assert created == ["wait_for_input", "bulk_import"], "Airflow creates no task instance before a task's start"
    backfill = dag.iter_dagrun_infos_between(datetime(2025, 12, 30, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    assert [i.data_interval.start.date().isoformat() for i in backfill] == ["2025-12-30", "2025-12-31",
                                                                             "2026-01-01"]
