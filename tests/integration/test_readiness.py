"""Readiness: a commit's asset event says what it made visible, and a downstream DAG
scheduled on the asset waits for it with SleeperVisibleSensor and reads exactly it."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.airflow.triggers.visible import SleeperVisibleTrigger, visible
from tests.integration import test_dags as dag_tests

sleeper_home = dag_tests.sleeper_home
sleeper = dag_tests.sleeper
HERE = Path(__file__).with_name("readiness")


def _rows(prefix: str, n: int) -> pa.Table:
    return pa.table({"key": [f"{prefix}{i:05d}" for i in range(n)], "ts": pa.array(range(n), pa.int64()),
                     "value": ["v"] * n})


def lineage_env(where: Path) -> dict[str, str]:
    """OpenLineage on, every event appended to a file under ``where``."""
    where.mkdir()
    transport = {"type": "file", "log_file_path": str(where / "events.jsonl"), "append": True}
    return {"AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(transport), "AIRFLOW__OPENLINEAGE__NAMESPACE": "test"}


def lineage_events(where: Path) -> list[dict]:
    return [json.loads(line) for p in sorted(where.iterdir()) for line in p.read_text().splitlines() if line]


def test_a_dag_on_the_asset_waits_for_the_commit_and_reads_exactly_its_rows(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path, tmp_path: Path) -> None:
    table = sleeper.create_table("events", dag_tests.SCHEMA, split_points=["m"])
    table.ingest(_rows("x", 300))  # older data, in the other partition
    path = tmp_path / "new.parquet"
    pq.write_table(_rows("b", 120), path)
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "readiness_dags.py", dags)
    proc = subprocess.run([sys.executable, str(HERE / "run_readiness.py"), str(dags), str(path)], cwd=airflow_home,
                          env=dag_tests._env(airflow_home, sleeper_home, AIRFLOW__CORE__DAGS_FOLDER=str(dags),
                                             **lineage_env(tmp_path / "lineage")),
                          capture_output=True, text=True,
                          timeout=300)
    result = dag_tests._result(proc)
    assert (result["up"], result["down"], result["read"]) == ("success", "success", "success"), proc.stdout[-3000:]
    (extra,) = result["events"]
    assert extra["table"] == "events" and (extra["files"], extra["rows"]) == (1, 120)
    assert extra["transaction"] == sleeper.state_store.transaction_number(table.info.table_id)
    assert extra["key_range"] == {"field": "key", "min": "", "max": "m"}
    assert "READ 120 rows in [, m)" in proc.stdout, "the downstream DAG read exactly the committed rows"
    # the ingest task's OpenLineage: the file read, the table written with its row count and schema
    (complete,) = [e for e in lineage_events(tmp_path / "lineage")
                   if e["eventType"] == "COMPLETE" and e["job"]["name"] == "upstream.ingest"]
    assert [(d["namespace"], d["name"]) for d in complete["inputs"]] == [("file", str(path))]
    (out,) = complete["outputs"]
    assert (out["namespace"], out["name"]) == (f"sleeper://{sleeper.state_store.instance_id()}", "events")
    assert out["outputFacets"]["outputStatistics"]["rowCount"] == 120
    assert [f["name"] for f in out["facets"]["schema"]["fields"]] == ["key", "ts", "value"]


def test_the_trigger_fires_once_the_records_are_visible(sleeper: Sleeper, sleeper_home: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLEEPER_HOME", str(sleeper_home))
    table = sleeper.create_table("events", dag_tests.SCHEMA)
    before = sleeper.state_store.transaction_number(table.info.table_id)
    assert not visible(sleeper, "events", min_records=50)
    trigger = SleeperVisibleTrigger(table="events", min_records=50, min_transaction=before + 1, poll_seconds=0.05)
    polled = threading.Event()
    original = trigger._check

    def check() -> bool:
        ok = original()
        polled.set()
        return ok

    trigger._check = check  # type: ignore[method-assign]

    async def wait() -> object:
        runs = trigger.run()
        first = asyncio.ensure_future(runs.__anext__())
        await asyncio.to_thread(polled.wait, 30)
        assert not first.done(), "nothing committed yet: the trigger waits"
        await asyncio.to_thread(table.ingest, _rows("a", 50))
        return await asyncio.wait_for(first, 30)

    event = asyncio.run(wait())
    assert event.payload == {"status": "visible", "table": "events"}  # type: ignore[attr-defined]
    assert visible(sleeper, "events", min_records=50, min_transaction=before + 1)


def test_a_deferrable_sensor_waits_in_its_trigger_until_the_rows_are_visible(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path, tmp_path: Path) -> None:
    """The sensor finds 300 rows of the 420 it waits for, defers; its trigger polls (inline
    under dag.test()) and finds them missing; only then are 120 more ingested; the trigger
    fires and the sensor succeeds."""
    sleeper.create_table("events", dag_tests.SCHEMA).ingest(_rows("x", 300))
    path = tmp_path / "later.parquet"
    pq.write_table(_rows("b", 120), path)
    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "readiness_dags.py", dags)
    proc = subprocess.run([sys.executable, str(HERE / "run_deferred_sensor.py"), str(dags), str(path), "420"],
                          cwd=airflow_home, env=dag_tests._env(airflow_home, sleeper_home,
                                                               AIRFLOW__CORE__DAGS_FOLDER=str(dags)),
                          capture_output=True, text=True, timeout=300)
    result = dag_tests._result(proc)
    assert (result["run"], result["wait"]) == ("success", "success"), proc.stdout[-3000:]
    assert "[DAG TEST] running trigger in line" in proc.stdout, "the sensor deferred"
    assert result["polls"][0] is False and result["polls"][-1] is True, result["polls"]
    assert sleeper.table("events").query(ranges=[("", None)]).num_rows == 420
