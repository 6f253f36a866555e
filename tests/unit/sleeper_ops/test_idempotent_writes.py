"""Idempotent client writes through the Python API and the CLI (statestore.client_writes):
a write or an ingest request sent again with its request id stores nothing more and
answers as the first did; the id with other input is refused; GC forgets ids older
than ``sleeper.table.write.idempotency.hours``."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sleeper_ops.api
from statestore.client_writes import IdempotencyKeyError, IdempotencyKeyReusedError
from statestore.errors import PropertyError
from tests.unit.sleeper_ops.test_cli import assert_one_line_error, ok
from tests.unit.sleeper_ops.test_cli import home as home
from tests.unit.sleeper_ops.test_cli import run as run

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "sortKeyFields": [],
          "valueFields": [{"name": "v", "type": "StringType"}]}


@pytest.fixture
def t(sleeper):  # type: ignore[no-untyped-def]
    return sleeper.create_table("t", SCHEMA, split_points=[100])


def _rows(lo: int, hi: int) -> list[dict]:
    return [{"key": i, "v": f"v{i}"} for i in range(lo, hi)]


def test_a_resent_write_returns_the_first_seq_and_its_records_are_stored_once(t) -> None:  # type: ignore[no-untyped-def]
    first = t.write(_rows(0, 10), request_id="req-1")
    t.write(_rows(10, 12))
    again = t.write(_rows(0, 10), request_id="req-1")
    assert (again.seq, again.records) == (first.seq, 10)
    assert t.buffer_stats().rows == 12
    t.flush()
    assert t.query(ranges=[(0, None)])["key"].to_pylist() == list(range(12))


def test_a_request_id_reused_for_other_records_is_refused(t) -> None:  # type: ignore[no-untyped-def]
    t.write(_rows(0, 10), request_id="req-1")
    with pytest.raises(IdempotencyKeyReusedError, match="'req-1' was already used for a different request"):
        t.write(_rows(0, 11), request_id="req-1")
    with pytest.raises(IdempotencyKeyError, match="printable ASCII"):
        t.write(_rows(0, 1), request_id="")
    assert t.buffer_stats().rows == 10


def test_a_resent_ingest_request_queues_nothing_more(t, input_dir) -> None:  # type: ignore[no-untyped-def]
    files = []
    for i in range(2):
        pq.write_table(pa.table({"key": pa.array([i], pa.int64()), "v": ["x"]}), input_dir / f"f{i}.parquet")
        files.append(str(input_dir / f"f{i}.parquet"))
    first = t.ingest_request(files, request_id="in-1")
    again = t.ingest_request(files, request_id="in-1")
    assert [r.request_id for r in again] == [r.request_id for r in first] and len(first) == 2
    assert len(t.sleeper.state_store.list_ingest_requests(t.info.table_id)) == 2
    with pytest.raises(IdempotencyKeyReusedError):
        t.ingest_request(files[:1], request_id="in-1")


def test_gc_forgets_request_ids_after_the_idempotency_window(sleeper) -> None:  # type: ignore[no-untyped-def]
    t = sleeper.create_table("w", SCHEMA, properties={"sleeper.table.write.idempotency.hours": "2"})
    first = t.write(_rows(0, 3), request_id="r")
    store = sleeper.state_store
    t.gc(now_ms=store.client_write(t.info.table_id, "r").written_ms + 3_600_000)
    assert t.write(_rows(0, 3), request_id="r").seq == first.seq  # within 2 hours: remembered
    t.gc(now_ms=store.client_write(t.info.table_id, "r").written_ms + 2 * 3_600_000 + 1)
    assert store.client_write(t.info.table_id, "r") is None
    assert t.write(_rows(0, 3), request_id="r").seq != first.seq


@pytest.mark.parametrize("value", ["0", "721", "x"])
def test_the_idempotency_window_is_refused_outside_1_to_720_hours(sleeper, value: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PropertyError, match="sleeper.table.write.idempotency.hours"):
        sleeper.create_table("w", SCHEMA, properties={"sleeper.table.write.idempotency.hours": value})


def test_cli_write_and_ingest_request_repeated_with_a_request_id(home, run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    ok(run("table", "create", "w", "--schema", str(tmp_path / "schema.json")))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(0, 3)))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(5, 6)))
    first = ok(run("write", "w", str(tmp_path / "a.jsonl"), "--request-id", "cli-1")).out
    again = ok(run("write", "w", str(tmp_path / "a.jsonl"), "--request-id", "cli-1")).out
    assert first.split("(")[1].split(")")[0] == again.split("(")[1].split(")")[0]  # "sequence number N"
    assert_one_line_error(run("write", "w", str(tmp_path / "b.jsonl"), "--request-id", "cli-1"),
                          "already used for a different request")
    got = [json.loads(x)["key"] for x in ok(run("query", "w", "--range", "0", "null")).out.splitlines()]
    assert got == [0, 1, 2]
    queued = json.loads(ok(run("ingest-request", "w", str(tmp_path / "a.jsonl"), "--json",
                               "--request-id", "cli-2")).out)
    repeat = json.loads(ok(run("ingest-request", "w", str(tmp_path / "a.jsonl"), "--json",
                               "--request-id", "cli-2")).out)
    assert [r["request_id"] for r in repeat] == [r["request_id"] for r in queued] and len(queued) == 1
    shared = sleeper_ops.api.Sleeper(home)
    with shared as s:
        assert len(s.state_store.list_ingest_requests(s.table("w").info.table_id)) == 1


def test_sleeper_ingest_with_a_request_id_stores_once_and_refuses_other_files(home, run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    ok(run("table", "create", "t", "--schema", str(tmp_path / "schema.json")))
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"key": pa.array([1, 2, 3], pa.int64()), "v": ["x", "y", "z"]}), a)
    pq.write_table(pa.table({"key": pa.array([4], pa.int64()), "v": ["w"]}), b)
    assert "ingested 3 records" in ok(run("ingest", "t", str(a), "--request-id", "load-1")).out
    again = ok(run("ingest", "t", str(a), "--request-id", "load-1")).out
    assert "already ingested (a repeat of request id load-1): 3 records" in again
    assert_one_line_error(run("ingest", "t", str(b), "--request-id", "load-1"), "idempotency key 'load-1'")
    got = [json.loads(x)["key"] for x in ok(run("query", "t", "--range", "0", "null")).out.splitlines()]
    assert got == [1, 2, 3]  # every record once


def test_a_cli_ingest_whose_outcome_is_unknown_names_the_request_id_that_finishes_it(
        home, run, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from statestore.errors import CommitOutcomeUnknownError

    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    ok(run("table", "create", "t", "--schema", str(tmp_path / "schema.json")))
    a = tmp_path / "a.parquet"
    pq.write_table(pa.table({"key": pa.array([1, 2, 3], pa.int64()), "v": ["x", "y", "z"]}), a)
    with sleeper_ops.api.Sleeper(home) as shared:
        store = shared.state_store
    real = store.commit

    def lost(*args, **kwargs):  # type: ignore[no-untyped-def]
        real(*args, **kwargs)
        raise CommitOutcomeUnknownError("commit add_files to table t: the state store was lost (injected)")

    monkeypatch.setattr(store, "commit", lost)
    failed = run("ingest", "t", str(a))
    assert_one_line_error(failed, "run the command again with --request-id cli-ingest-")
    key = failed.err.split("--request-id ")[1].split()[0]
    monkeypatch.setattr(store, "commit", real)
    assert "already ingested" in ok(run("ingest", "t", str(a), "--request-id", key)).out
    got = [json.loads(x)["key"] for x in ok(run("query", "t", "--range", "0", "null")).out.splitlines()]
    assert got == [1, 2, 3]  # every record once
