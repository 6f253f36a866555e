"""``GET /metrics``: the Prometheus figures of each table match the table itself after
ingest, buffered writes, a flush, compaction and garbage collection."""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.web.rest import create_app
from statestore.postgres import PostgresStateStore
from statestore.retry import COMMIT_RETRIES

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SCHEMA = {"rowKeyFields": [{"name": "id", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}


@pytest.fixture
def sleeper(pg_dsn: str, tmp_path: Path) -> Iterator[Sleeper]:
    s = Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data")))
    s.create_table("events", SCHEMA, split_points=[50], properties={
        "sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "2"})
    s.create_table("hidden", SCHEMA)
    yield s
    s.close()


def scrape(client: TestClient) -> dict[tuple[str, str], float]:
    got = client.get("/metrics")
    assert got.status_code == 200, got.text
    assert got.headers["content-type"].startswith("text/plain")
    return {(s.name, s.labels["table"]): s.value
            for family in text_string_to_metric_families(got.text) for s in family.samples}


def batch(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "v": [f"v{i}" for i in range(lo, hi)]})


def expected(sleeper: Sleeper, name: str) -> dict[str, float]:
    """The figures read from the whole state: what the bounded metrics must equal."""
    state = sleeper.table(name).state()
    per_leaf: dict[str, int] = {p.id: 0 for p in state.partitions.values() if p.is_leaf}
    for ref in state.references.values():
        per_leaf[ref.partition_id] = per_leaf.get(ref.partition_id, 0) + 1
    return {"sleeper_records": sum(r.record_count for r in state.references.values()),
            "sleeper_records_approximate": int(any(r.count_approximate for r in state.references.values())),
            "sleeper_files": len(state.files), "sleeper_leaf_partitions": len(per_leaf),
            "sleeper_leaf_files_max": max(per_leaf.values()),
            "sleeper_gc_files_pending": sum(1 for f in state.files if not state.refs_by_file.get(f)),
            "sleeper_buffer_records": sleeper.table(name).buffer_stats().rows}


def check(client: TestClient, sleeper: Sleeper) -> dict[tuple[str, str], float]:
    got = scrape(client)
    for metric, value in expected(sleeper, "events").items():
        assert got[(metric, "events")] == value, metric
    return got


def test_metrics_match_the_table_after_ingest_writes_compaction_and_gc(sleeper: Sleeper) -> None:
    readable = lambda request, names: [n for n in names if n != "hidden"]  # noqa: E731
    with TestClient(create_app(lambda: sleeper, table_filter=readable)) as client:
        got = check(client, sleeper)
        assert got[("sleeper_records", "events")] == 0
        assert not any(table == "hidden" for _, table in got), "only the tables the requester may read"

        events = sleeper.table("events")
        events.ingest(batch(0, 100))
        events.ingest(batch(100, 200))
        got = check(client, sleeper)
        assert got[("sleeper_records", "events")] == 200 and got[("sleeper_leaf_files_max", "events")] == 2

        events.write([{"id": 1000 + i, "v": "w"} for i in range(7)])
        got = check(client, sleeper)
        assert got[("sleeper_buffer_records", "events")] == 7
        assert got[("sleeper_buffer_oldest_seconds", "events")] >= 0
        events.flush()
        got = check(client, sleeper)
        assert (got[("sleeper_buffer_records", "events")], got[("sleeper_records", "events")]) == (0, 207)

        events.compact()
        got = check(client, sleeper)
        assert got[("sleeper_records", "events")] == 207 and got[("sleeper_gc_files_pending", "events")] > 0
        assert got[("sleeper_compaction_jobs_pending", "events")] == 0
        assert got[("sleeper_recent_jobs_failed", "events")] == 0

        events.gc(now_ms=int(time.time() * 1000) + 3600_000)  # once the GC delay has passed
        got = check(client, sleeper)
        assert got[("sleeper_gc_files_pending", "events")] == 0 and got[("sleeper_records", "events")] == 207

        pending = [r for r in sleeper.state_store.list_ingest_requests(events.info.table_id)
                   if r.status == "pending"]
        assert got[("sleeper_ingest_requests_pending", "events")] == len(pending) == 0


def test_commit_retries_are_counted_per_table_since_the_process_started(sleeper: Sleeper) -> None:
    tid = sleeper.table("events").info.table_id
    before = sleeper.state_store.commit_retries(tid)
    COMMIT_RETRIES.add(tid, 3)  # what a backend does on each retried commit
    with TestClient(create_app(lambda: sleeper)) as client:
        assert scrape(client)[("sleeper_commit_retries_total", "events")] == before + 3


def test_a_commit_retried_after_a_serialization_failure_is_counted(sleeper: Sleeper,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import psycopg

    from statestore.postgres import table_commits as pg_store

    real = pg_store.commit_attempt
    failures = [1]

    def conflicting_once(*args: object, **kwargs: object) -> object:
        if failures:
            failures.pop()
            raise psycopg.errors.SerializationFailure("could not serialize access")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(pg_store, "commit_attempt", conflicting_once)
    events = sleeper.table("events")
    before = sleeper.state_store.commit_retries(events.info.table_id)
    events.ingest(batch(0, 10))
    assert sleeper.state_store.commit_retries(events.info.table_id) == before + 1
    assert events.query(ranges=[(0, None)]).num_rows == 10


@pytest.fixture(scope="module")
def moto_url() -> Iterator[str]:
    from tests.integration.statestore.conftest import serial_moto_server

    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield url


def test_commits_that_lose_the_race_on_dynamodb_count_one_retry_each(moto_url: str, tmp_path: Path) -> None:
    """Two committers on one DynamoDB table: before each of the loser's first three
    writes the winner commits, taking the log number the loser read, so DynamoDB
    cancels the loser's write three times; its fourth try applies. The counter rises by
    exactly 3, and every file of both committers is in the table once."""
    from statestore.dynamodb import open_dynamodb
    from statestore.files import FileReference
    from statestore.transactions import AddFiles
    from tests.integration.statestore.conftest import dynamodb_options

    options = dynamodb_options(moto_url, tmp_path / "blobs")
    # single commits (a lost race would send a group-commit store's commit to group commit, which has none)
    loser, winner = open_dynamodb(**options, group_commit=False), open_dynamodb(**options, group_commit=False)
    s = Sleeper(state_store=loser, objects=ObjectStore(str(tmp_path / "data")))
    tid = s.create_table("events", SCHEMA).info.table_id
    root = next(iter(s.table("events").state().partitions))
    client = loser._dynamo.client
    real = client.transact_write_items
    writes, wins = [0], 3

    def the_winner_commits_first(**kwargs: object) -> object:
        writes[0] += 1
        if writes[0] <= wins:
            assert winner.commit(tid, AddFiles((FileReference(f"winner-{writes[0]}.parquet", root, 10),)))
        return real(**kwargs)

    client.transact_write_items = the_winner_commits_first
    try:
        with TestClient(create_app(lambda: s)) as web:
            before = scrape(web)[("sleeper_commit_retries_total", "events")]
            assert loser.commit(tid, AddFiles((FileReference("loser.parquet", root, 5),)))
            after = scrape(web)[("sleeper_commit_retries_total", "events")]
        assert (writes[0], after - before) == (wins + 1, wins)
        state = open_dynamodb(**options).load_state(tid)
        assert sorted(state.files) == ["loser.parquet", "winner-1.parquet", "winner-2.parquet", "winner-3.parquet"]
        assert sum(r.record_count for r in state.references.values()) == 35
    finally:
        client.transact_write_items = real
        s.close()
        winner.close()


def test_the_status_page_plots_the_backlog_each_scrape_and_page_read_saw(sleeper: Sleeper, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read of /metrics or of the table's page is a sample; the page's backlog
    charts carry the samples' values, which are the figures /metrics gave each time."""
    import html
    import json
    import re

    import pyarrow.parquet as pq

    from sleeper_ops.metrics import BACKLOG, BACKLOG_FIELDS
    from sleeper_ops.web.status_page import create_status_app

    monkeypatch.setattr(BACKLOG, "min_gap_ms", 0)  # keep every sample, however close
    events = sleeper.table("events")
    names = {"buffer_records": "sleeper_buffer_records", "ingest_requests_pending": "sleeper_ingest_requests_pending",
             "compaction_jobs_pending": "sleeper_compaction_jobs_pending",
             "gc_files_pending": "sleeper_gc_files_pending", "buffer_oldest_seconds": "sleeper_buffer_oldest_seconds"}
    seen: dict[str, list[float]] = {f: [] for f in BACKLOG_FIELDS}
    with TestClient(create_app(lambda: sleeper)) as rest, TestClient(create_status_app(lambda: sleeper)) as ui:
        def step() -> None:
            got = scrape(rest)
            for f in BACKLOG_FIELDS:
                seen[f].append(got[(names[f], "events")])

        step()
        events.ingest(batch(0, 100))
        events.ingest(batch(100, 200))
        events.write([{"id": 1000 + i, "v": "w"} for i in range(7)])
        for i in range(2):
            pq.write_table(batch(300 + i * 10, 310 + i * 10), tmp_path / f"req-{i}.parquet")
        events.ingest_request([str(tmp_path / f"req-{i}.parquet") for i in range(2)])
        step()
        events.flush()
        events.compact()
        step()
        page = ui.get("/tables/events")
    assert page.status_code == 200
    charts = {m.group(1): json.loads(html.unescape(m.group(2)))
              for m in re.finditer(r"aria-label='backlog: (\w+)' data-values='([^']*)'", page.text)}
    assert set(charts) == set(BACKLOG_FIELDS)
    for f in BACKLOG_FIELDS:
        assert charts[f][:3] == seen[f], f  # the three scrapes, then the page's own read
        assert len(charts[f]) == 4
    assert charts["buffer_records"] == [0, 7, 0, 0]
    assert charts["gc_files_pending"][2:] == [expected(sleeper, "events")["sleeper_gc_files_pending"]] * 2
    assert charts["gc_files_pending"][2] > 0, "compaction left its inputs for GC"
    assert charts["compaction_jobs_pending"] == [0, 0, 0, 0]
    assert charts["ingest_requests_pending"] == [0, 2, 2, 2], "queued, no batcher ran"
