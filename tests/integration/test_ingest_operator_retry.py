"""SleeperIngestOperator retried by Airflow (issue 33 finding 7): every try of a task
instance ingests under one idempotency key (DAG id, task id, run id), so a retry after
``CommitOutcomeUnknownError`` -- the commit applied, its reply was lost -- stores every
record once."""

from __future__ import annotations

import collections
import contextlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.operators.base import task_request_id
from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
from sleeper_ops.io.storage import ObjectStore
from statestore.client_writes import IdempotencyKeyReusedError
from statestore.errors import CommitOutcomeUnknownError
from tests.unit.sleeper_ops.test_ingest_idempotency import SCHEMA, LostReply

pytestmark = pytest.mark.integration


def _context(run_id: str = "scheduled__2026-11-27", map_index: int = -1) -> dict[str, Any]:
    events = collections.defaultdict(lambda: SimpleNamespace(add=lambda *a, **k: None))
    ti = SimpleNamespace(dag_id="load_events", task_id="ingest", map_index=map_index, run_id=run_id, try_number=1)
    return {"ti": ti, "run_id": run_id,
            "outlet_events": events}


def test_an_airflow_retry_after_an_unknown_outcome_ingests_every_record_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = LostReply()
    sleeper = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    t = sleeper.create_table("events", SCHEMA, split_points=["m"])
    monkeypatch.setattr(SleeperHook, "get_conn", lambda self: contextlib.nullcontext(sleeper))
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": ["a", "b", "x", "y"], "v": ["1", "2", "3", "4"]}), path)
    op = SleeperIngestOperator(task_id="ingest", table="events", files=[str(path)])
    store.lose_next = True
    with pytest.raises(CommitOutcomeUnknownError):
        op.execute(_context())  # try 1: applied, reply lost
    again = op.execute(_context())  # try 2, the same task instance
    assert again["repeat"] and again["records"] == 4
    assert sorted(t.query(ranges=[("", None)])["key"].to_pylist()) == ["a", "b", "x", "y"]  # each record once
    # another run of the DAG is another request: it ingests
    assert op.execute(_context(run_id="scheduled__2026-11-28"))["records"] == 4
    assert t.query(ranges=[("", None)]).num_rows == 8
    # the files changed between tries of one task instance: refused, nothing stored
    pq.write_table(pa.table({"key": ["c"], "v": ["5"]}), path)
    with pytest.raises(IdempotencyKeyReusedError, match="key 'airflow:load_events/ingest/scheduled__2026-11-28'"):
        op.execute(_context(run_id="scheduled__2026-11-28"))
    assert t.query(ranges=[("", None)]).num_rows == 8
    sleeper.close()


def test_the_default_key_names_the_task_instance_and_its_map_index() -> None:
    assert task_request_id(_context()) == "airflow:load_events/ingest/scheduled__2026-11-27"
    assert task_request_id(_context(map_index=3)) == "airflow:load_events/ingest/scheduled__2026-11-27/3"
    long = task_request_id(_context(run_id="r" * 300))
    assert long.startswith("airflow:") and len(long) == 8 + 64


def test_an_export_task_retried_after_its_manifest_was_written_finds_its_own_export(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The export operator's key defaults to the task instance's too: a retry (the worker
    died after the manifest) answers "already exported" instead of failing on a
    destination holding "another" export."""
    from sleeper_ops.airflow.operators.export import SleeperExportOperator

    sleeper = Sleeper(state_store=LostReply(), objects=ObjectStore(str(tmp_path / "data")))
    t = sleeper.create_table("events", SCHEMA, split_points=["m"])
    t.ingest(pa.table({"key": ["a", "x"], "v": ["1", "2"]}))
    monkeypatch.setattr(SleeperHook, "get_conn", lambda self: contextlib.nullcontext(sleeper))
    op = SleeperExportOperator(task_id="export", table="events", destination=str(tmp_path / "out"))
    first = op.execute(_context())
    again = op.execute(_context())  # the task's retry
    assert first["written"] and not again["written"] and again["export_key"] == first["export_key"]
    assert first["export_key"] == "airflow:load_events/ingest/scheduled__2026-11-27" and again["records"] == 2
    sleeper.close()
