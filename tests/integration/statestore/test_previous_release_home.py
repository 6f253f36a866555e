"""Stored formats stay readable: a home recorded by a previous release
(tests/compat/homes/<release>-<backend>/, made by tests/compat/record_home.py) opens with
today's code on both backends, and query, write, flush, compact, delete, GC and history
work on it, with the exact records the recording wrote.

The recording (see record_home.py): table ``events`` split at ``g`` and ``p``; ingested
apple 1, kiwi 2, plum 3, then banana 4, lemon 5, zucchini 6; compacted (three committed
compaction jobs, their six inputs unreferenced); ingested cherry 7, quince 8; deleted
kiwi (tombstone 1); wrote fig 9, kiwi 10 to the buffer with a request id (unflushed);
queued an ingest request of mango 11 (not ingested).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from statestore.properties import HISTORY_RETENTION_MINUTES as RETENTION
from tests.compat import record_home as rec
from tests.compat.restore import load, recorded_homes, restore_dynamodb, restore_postgres

pytestmark = pytest.mark.integration

#: what a query of everything returns from the recorded home: the delete hides kiwi 2,
#: the buffer's kiwi 10 was written after it
RECORDED_ROWS = [("apple", 1), ("banana", 4), ("cherry", 7), ("fig", 9), ("kiwi", 10), ("lemon", 5),
                 ("plum", 3), ("quince", 8), ("zucchini", 6)]


def _rows(table: Any, **query: Any) -> list[tuple[str, int]]:
    result = table.query(**(query or {"ranges": [("", None)]}))
    return list(zip(result.column("key").to_pylist(), result.column("count").to_pylist()))


def _open(home: Path, toml: str) -> Any:
    from sleeper_ops import Sleeper

    (home / "sleeper.toml").write_text(toml)
    return Sleeper(home)


@pytest.fixture(params=[pytest.param(p, id=p.name) for p in recorded_homes("postgres")])
def postgres_home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, dict[str, Any]]]:
    dsn = request.getfixturevalue("pg_empty_dsn")
    home = tmp_path / "home"
    state, manifest = load(request.param, home)
    restore_postgres(state, dsn, tmp_path / "migrations")
    with _open(home, f'[state_store]\nbackend = "postgres"\ndsn = "{dsn}"\n') as s:
        yield s, manifest


@pytest.fixture(params=[pytest.param(p, id=p.name) for p in recorded_homes("dynamodb")])
def dynamodb_home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, dict[str, Any]]]:
    url = request.getfixturevalue("moto_endpoint_url")
    home = tmp_path / "home"
    state, manifest = load(request.param, home)
    prefix = f"t{uuid.uuid4().hex[:12]}-"
    restore_dynamodb(state, url, prefix)
    with _open(home, f'[state_store]\nbackend = "dynamodb"\nendpoint_url = "{url}"\nregion = "us-east-1"\n'
                     f'table_prefix = "{prefix}"\naccess_key = "test"\nsecret_key = "test"\n') as s:
        yield s, manifest


def test_a_postgres_home_of_the_previous_release_works(postgres_home: tuple[Any, dict[str, Any]]) -> None:
    _works(*postgres_home)


def test_a_dynamodb_home_of_the_previous_release_works(dynamodb_home: tuple[Any, dict[str, Any]]) -> None:
    _works(*dynamodb_home)


def test_a_postgres_home_of_the_previous_release_gets_an_instance_id_on_its_first_open(
        postgres_home: tuple[Any, dict[str, Any]]) -> None:
    """The previous release stored no instance id: the first open makes one (migration
    011, run on first use), and the store opened again gives the same."""
    _keeps_an_instance_id(postgres_home[0])


def test_a_dynamodb_home_of_the_previous_release_gets_an_instance_id_on_its_first_open(
        dynamodb_home: tuple[Any, dict[str, Any]]) -> None:
    """As for PostgreSQL, through the ``instance`` item of the catalog table."""
    _keeps_an_instance_id(dynamodb_home[0])


def _keeps_an_instance_id(s: Any) -> None:
    from sleeper_ops import Sleeper

    first = s.state_store.instance_id()
    assert str(uuid.UUID(first)) == first
    with Sleeper(s.config.home) as again:
        assert again.state_store.instance_id() == first


def _works(s: Any, manifest: dict[str, Any]) -> None:
    t = s.table(rec.TABLE)
    table_id = manifest["table_id"]
    assert t.info.table_id == table_id
    assert [p.id for p in s.state_store.partitions(table_id) if p.is_leaf] and \
        sum(p.is_leaf for p in s.state_store.partitions(table_id)) == len(rec.SPLIT_POINTS) + 1

    # What the previous release wrote reads back: state, jobs, requests, buffer, history.
    state = t.state()
    assert sorted([r.filename, r.partition_id, r.record_count] for r in state.references.values()) \
        == manifest["references"]
    assert sorted(state.files) == manifest["files"]
    assert [tb.number for tb in state.tombstones.values()] == [1] and state.delete_count == 1
    assert {j.job_id: [j.kind, j.status] for j in t.jobs()} == manifest["jobs"]
    queued = s.state_store.list_ingest_requests(table_id)
    assert [(r.request_id, r.status, Path(r.filename).name) for r in queued] \
        == [(manifest["ingest_requests"][0], "pending", "queued.jsonl")]
    history = [[h.number, h.kind, h.files_added, h.files_removed, h.records_added, h.records_removed]
               for h in t.history(limit=100)]
    assert history == manifest["history"]
    assert (t.buffer_stats().entries, t.buffer_stats().rows) == (1, 2)

    # query: files, the buffer and the tombstone; an exact key; as of the first ingest
    assert _rows(t) == RECORDED_ROWS
    assert _rows(t, keys=["kiwi"]) == [("kiwi", 10)]
    first_ingest = min(h[0] for h in manifest["history"] if h[1] == "add_files")
    s.set_properties(rec.TABLE, {RETENTION: "100000000"})  # the recording is older than the default 30 minutes
    assert sorted(_rows(t, ranges=[("", None)], as_of=first_ingest)) == [("apple", 1), ("kiwi", 2), ("plum", 3)]
    s.unset_properties(rec.TABLE, [RETENTION])

    # write: the recorded request id answers with the first write's seq and stores nothing
    again = t.write(rec.BUFFERED, request_id=rec.WRITE_REQUEST_ID)
    assert again.seq == manifest["write_seq"]
    assert (t.buffer_stats().entries, t.buffer_stats().rows) == (1, 2)
    t.write([{"key": "date", "count": 12}])
    assert (t.buffer_stats().entries, t.buffer_stats().rows) == (2, 3)

    # flush: the buffer into files, one per leaf it touches
    flushed = t.flush(run_id="compat-test")
    assert (flushed.records, flushed.entries) == (3, 2)
    assert (t.buffer_stats().entries, t.buffer_stats().rows) == (0, 0)
    after_flush = sorted([*RECORDED_ROWS, ("date", 12)])
    assert _rows(t) == after_flush
    references = len(t.state().references)
    assert references == len(manifest["references"]) + 2  # fig and date in one leaf, kiwi in another

    # compact: two files a job (the recorded batch size): a job in each leaf, the
    # tombstone's kiwi 2 purged, nothing else lost; the first leaf keeps a third file
    report = t.compact(run_id="compat-test")
    assert report.count("committed") == 3, report
    assert len(t.state().references) == 4
    assert _rows(t) == after_flush

    # delete
    t.delete(keys=["lemon"])
    after_delete = [r for r in after_flush if r[0] != "lemon"]
    assert _rows(t) == after_delete
    assert t.state().delete_count == 2

    # history: today's transactions on top of the recorded ones, numbered after them
    now = t.history(limit=100)
    assert [h[0] for h in manifest["history"]] == [h.number for h in now[-len(manifest["history"]):]]
    new = [h.kind for h in now[:-len(manifest["history"])]]
    assert new == ["delete_records", *["replace_file_references"] * 3, "assign_job_ids", "add_files"], new
    assert now[0].number > manifest["history"][0][0]
    assert [r.status for r in s.state_store.list_ingest_requests(table_id)] == ["pending"]

    # GC, judged an hour ahead: the recorded compaction inputs (unreferenced) and today's
    # go (and the history older than its retention)
    gc = t.gc(now_ms=int(time.time() * 1000) + 3_600_000, orphans=False)
    assert set(manifest["files"]) - {r[0] for r in manifest["references"]} <= set(gc.deleted)
    assert all(t.state().refs_by_file.get(f) for f in t.state().files)
    assert _rows(t) == after_delete
