"""A backfill of a maintenance DAG is refused in one line saying why: which DAG, that
maintenance works on the table's current state and is not backfilled, and what to do
instead; over Airflow's REST API (and so the UI's backfill dialog) that line replaces
Airflow's bare ``Dag with dag_id: ... does not allow backfill runs``."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("airflow")

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from sleeper_ops.orchestration.backfills import BackfillRefusalMiddleware, refusal_for
from sleeper_ops.orchestration.dag_problems import backfill_refusal

AIRFLOW_SAYS = "Dag with dag_id: '{}' does not allow backfill runs"


def test_the_refusal_names_the_dag_the_table_why_and_what_to_do_instead() -> None:
    line = backfill_refusal("sleeper_events_compaction", "events", "compaction")
    assert line.startswith("sleeper_events_compaction is not backfilled: ")
    assert "table events" in line and "current state" in line
    assert "trigger a run now instead" in line and "/api/v2/dags/sleeper_events_compaction/dagRuns" in line
    assert "\n" not in line


@pytest.mark.parametrize("dag_id, table, operation", [
    ("sleeper_events_compaction", "events", "compaction"), ("sleeper_my_table_ingest_batcher", "my_table",
                                                             "ingest_batcher"),
    ("sleeper_a_gc", "a", "gc"), ("sleeper_x_split", "x", "split"), ("sleeper_x_flush", "x", "flush")])
def test_every_maintenance_dag_gets_the_refusal(dag_id: str, table: str, operation: str) -> None:
    assert refusal_for(dag_id) == backfill_refusal(dag_id, table, operation)


@pytest.mark.parametrize("dag_id", ["sleeper_events_bulk_import", "sleeper_events_export", "my_dag", "sleeper_gc"])
def test_other_dags_keep_airflows_answer(dag_id: str) -> None:
    assert refusal_for(dag_id) is None


def _client(detail: str, status: int = 400) -> TestClient:
    app = FastAPI()

    @app.post("/api/v2/backfills")
    @app.post("/api/v2/backfills/dry_run")
    def create() -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=status)

    app.add_middleware(BackfillRefusalMiddleware)
    return TestClient(app)


@pytest.mark.parametrize("path", ["/api/v2/backfills", "/api/v2/backfills/dry_run"])
def test_the_api_answers_the_refusal_in_place_of_airflows_bare_message(path: str) -> None:
    r = _client(AIRFLOW_SAYS.format("sleeper_events_compaction")).post(path, json={})
    assert r.status_code == 400
    assert r.json() == {"detail": backfill_refusal("sleeper_events_compaction", "events", "compaction")}
    assert int(r.headers["content-length"]) == len(r.content)


def test_the_refusal_of_a_dag_without_a_schedule_is_rewritten_too() -> None:
    """A DAG whose schedule is ``none``: Airflow's dry run says it is not periodic (422)."""
    airflow_says = "sleeper_events_gc has a non-periodic schedule that does not support backfills"
    r = _client(airflow_says, status=422).post("/api/v2/backfills/dry_run", json={})
    assert r.status_code == 422 and r.json() == {"detail": backfill_refusal("sleeper_events_gc", "events", "gc")}


def test_other_answers_pass_untouched() -> None:
    mine = AIRFLOW_SAYS.format("my_dag")
    assert _client(mine).post("/api/v2/backfills", json={}).json() == {"detail": mine}
    assert _client("fine", status=200).post("/api/v2/backfills", json={}).json() == {"detail": "fine"}
    assert _client("not json").post("/api/v2/backfills", content=json.dumps({})).status_code == 400


def test_the_plugin_installs_the_middleware_in_the_api_server() -> None:
    from sleeper_ops.orchestration.plugin import SleeperPlugin

    assert [m["middleware"] for m in SleeperPlugin.fastapi_root_middlewares] == [BackfillRefusalMiddleware]
