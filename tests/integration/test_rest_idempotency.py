"""Idempotent REST writes (DESIGN.md section 10) over the embedded PostgreSQL: an
``Idempotency-Key`` sent again gets the first answer and stores nothing; the key with
another body is 422; a write's 503 says whether its outcome is unknown."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from statestore.errors import StateStoreUnavailableError
from tests.integration.test_rest_api import TestClient, rec
from tests.integration.test_rest_api import client as client
from tests.integration.test_rest_api import inbox as inbox
from tests.integration.test_rest_api import sleeper as sleeper


def test_a_write_resent_with_its_key_returns_the_first_seq_and_is_stored_once(client: TestClient,
                                                                              sleeper: Sleeper) -> None:
    body = {"records": [rec("a"), rec("b")]}
    first = client.post("/tables/events/records", json=body, headers={"Idempotency-Key": "w-1"})
    assert first.status_code == 201
    client.post("/tables/events/records", json={"records": [rec("c")]})
    again = client.post("/tables/events/records", json=body, headers={"Idempotency-Key": "w-1"})
    assert again.status_code == 201 and again.json()["seq"] == first.json()["seq"]
    assert sleeper.table("events").buffer_stats().rows == 3
    got = client.get("/tables/events/records", params={"min": '""'}).json()["records"]
    assert [r["key"] for r in got] == ["a", "b", "c"]


def test_a_key_reused_with_another_body_is_422_naming_the_rule(client: TestClient, sleeper: Sleeper) -> None:
    client.post("/tables/events/records", json={"records": [rec("a")]}, headers={"Idempotency-Key": "w-1"})
    r = client.post("/tables/events/records", json={"records": [rec("z")]}, headers={"Idempotency-Key": "w-1"})
    assert r.status_code == 422 and "already used for a different request" in r.json()["detail"]
    bad = client.post("/tables/events/records", json={"records": [rec("z")]}, headers={"Idempotency-Key": "x" * 300})
    assert bad.status_code == 400 and "printable ASCII" in bad.json()["detail"]
    assert sleeper.table("events").buffer_stats().rows == 1


def test_an_ingest_request_resent_with_its_key_queues_nothing_more(client: TestClient, sleeper: Sleeper,
                                                                   inbox: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([1], pa.int64()), "v": ["x"]}), inbox / "a.parquet")
    body = {"files": [str(inbox / "a.parquet")]}
    first = client.post("/tables/numbers/ingest-requests", json=body, headers={"Idempotency-Key": "i-1"})
    again = client.post("/tables/numbers/ingest-requests", json=body, headers={"Idempotency-Key": "i-1"})
    assert first.status_code == again.status_code == 202
    assert again.json() == first.json()
    assert len(client.get("/tables/numbers/ingest-requests").json()) == 1


def test_a_write_whose_store_was_lost_is_503_with_outcome_unknown(client: TestClient, sleeper: Sleeper,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    store = sleeper.state_store
    real = store.append_buffer

    def lost_reply(*args, **kwargs):  # type: ignore[no-untyped-def]
        real(*args, **kwargs)  # stored, but the reply never came
        raise StateStoreUnavailableError("write to the buffer: server closed the connection unexpectedly")

    monkeypatch.setattr(store, "append_buffer", lost_reply)
    body = {"records": [rec("a")]}
    r = client.post("/tables/events/records", json=body, headers={"Idempotency-Key": "w-9"})
    assert r.status_code == 503
    assert r.json()["outcome"] == "unknown" and "same Idempotency-Key" in r.json()["retry"]
    monkeypatch.setattr(store, "append_buffer", real)
    retried = client.post("/tables/events/records", json=body, headers={"Idempotency-Key": "w-9"})
    assert retried.status_code == 201 and sleeper.table("events").buffer_stats().rows == 1
    assert retried.json()["seq"] == store.client_write(sleeper.table("events").info.table_id, "w-9").seq


def test_a_read_503_has_no_outcome(client: TestClient, sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch) -> None:
    def down(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StateStoreUnavailableError("state store down")

    monkeypatch.setattr(sleeper.state_store, "list_jobs", down)
    r = client.get("/tables/events/jobs")
    assert r.status_code == 503 and "outcome" not in r.json()


def test_a_delete_whose_store_was_lost_is_503_with_outcome_and_its_retry_answers_the_first_tombstone(
        client: TestClient, sleeper: Sleeper, monkeypatch: pytest.MonkeyPatch) -> None:
    client.post("/tables/events/records", json={"records": [rec("a"), rec("b")]})
    store = sleeper.state_store
    real = store.commit

    def lost_reply(*args, **kwargs):  # type: ignore[no-untyped-def]
        real(*args, **kwargs)  # committed, but the reply never came
        raise StateStoreUnavailableError("commit: server closed the connection unexpectedly")

    monkeypatch.setattr(store, "commit", lost_reply)
    r = client.delete("/tables/events/records", params={"key": '"a"'}, headers={"Idempotency-Key": "d-1"})
    assert r.status_code == 503
    assert r.json()["outcome"] == "unknown" and "same Idempotency-Key" in r.json()["retry"]
    monkeypatch.setattr(store, "commit", real)
    again = client.delete("/tables/events/records", params={"key": '"a"'}, headers={"Idempotency-Key": "d-1"})
    assert again.status_code == 200 and again.json()["tombstone"] == 1 and again.json()["applied"] is False
    other = client.delete("/tables/events/records", params={"key": '"b"'}, headers={"Idempotency-Key": "d-1"})
    assert other.status_code == 422 and "idempotency key 'd-1' was already used" in other.json()["detail"]
    assert sleeper.table("events").state().delete_count == 1
    got = client.get("/tables/events/records", params={"min": '""'}).json()["records"]
    assert [x["key"] for x in got] == ["b"]
