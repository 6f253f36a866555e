"""What only the PostgreSQL backend has: migrations, retries of serialization
failures, commits that load only what they touch, unavailability, the embedded server."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    CommitConflictError,
    FileReference,
    FileReferenceError,
    JobAssignment,
    ReplaceFileReferences,
    Schema,
    StateStoreUnavailableError,
    partitions_from_split_points,
)
from statestore.postgres import PostgresStateStore, migrate, migrations
from statestore.postgres import commits as pg_commits
from statestore.postgres import diff as pg_diff
from statestore.postgres import table_commits as pg_store
from statestore.postgres.embedded import EmbeddedPostgres
from statestore.retry import Backoff

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "LongType"}]})


def applied_versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]


def recording_backoff(max_attempts: int = 30) -> tuple[Backoff, list[float]]:
    pauses: list[float] = []
    return Backoff(max_attempts=max_attempts, base_seconds=0.001, sleep=pauses.append), pauses


# ----- migrations ---------------------------------------------------------------------------
def test_migrations_are_numbered_files_starting_at_one():
    versions = [v for v, _ in migrations()]
    assert versions[0] == 1 and versions == sorted(set(versions))


def test_migrations_apply_once_and_are_recorded(pg_empty_dsn):
    with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
        assert migrate(conn) == [v for v, _ in migrations()]
        assert migrate(conn) == []
    assert applied_versions(pg_empty_dsn) == [v for v, _ in migrations()]


def test_concurrent_migrations_apply_each_version_once(pg_empty_dsn):
    results: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def run() -> None:
        try:
            with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
                barrier.wait()
                results.append(migrate(conn))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(results, key=len) == [[], [], [], [v for v, _ in migrations()]]


def test_a_store_on_an_empty_database_migrates_it_on_first_use(pg_empty_dsn):
    with PostgresStateStore(pg_empty_dsn) as store:
        assert store.list_tables() == []
    assert applied_versions(pg_empty_dsn) == [v for v, _ in migrations()]


# ----- availability ---------------------------------------------------------------------------
def test_an_unreachable_server_is_reported_as_unavailable(tmp_path):
    store = PostgresStateStore(f"host={tmp_path} dbname=nothing", connect_timeout=2)
    with pytest.raises(StateStoreUnavailableError, match="cannot reach"):
        store.list_tables()
    store.close()


def test_a_closed_store_refuses_to_work(pg_dsn):
    store = PostgresStateStore(pg_dsn)
    store.list_tables()
    store.close()
    with pytest.raises(StateStoreUnavailableError, match="closed"):
        store.list_tables()


# ----- retries ---------------------------------------------------------------------------------
def _blocked_commit(pg_dsn: str, backoff: Backoff) -> tuple[str, BaseException | None]:
    """Commit AssignJobIds on a reference while another serializable transaction holds an
    update of that reference, committing only once the commit waits for it: the commit's
    first attempt must fail with a serialization failure."""
    store = PostgresStateStore(pg_dsn, backoff=backoff)
    parts = partitions_from_split_points(SCHEMA)
    table_id = store.create_table("t", SCHEMA, parts).table_id
    store.commit(table_id, AddFiles((FileReference("f", "root", 1),)))
    outcome: list[BaseException | None] = [None]
    with psycopg.connect(pg_dsn) as blocker:
        blocker.execute("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
        blocker.execute("UPDATE file_references SET record_count = 2 WHERE table_id = %s AND filename = 'f'",
                        (table_id,))

        def commit() -> None:
            try:
                store.commit(table_id, AssignJobIds((JobAssignment("j", "root", ("f",)),)))
            except BaseException as e:
                outcome[0] = e

        t = threading.Thread(target=commit)
        t.start()
        with psycopg.connect(pg_dsn, autocommit=True) as watcher:
            deadline = time.monotonic() + 30
            while not watcher.execute("SELECT 1 FROM pg_stat_activity WHERE datname = current_database()"
                                      " AND wait_event_type = 'Lock'").fetchone():
                assert time.monotonic() < deadline, "the commit never waited for the blocker"
                time.sleep(0.01)
        blocker.commit()
        t.join(timeout=30)
    state = store.load_state(table_id)
    store.close()
    return f"{state.references[('f', 'root')]}", outcome[0]


def test_a_serialization_failure_is_retried_until_the_commit_succeeds(pg_dsn):
    backoff, pauses = recording_backoff()
    final, error = _blocked_commit(pg_dsn, backoff)
    assert error is None
    assert len(pauses) >= 1
    assert "record_count=2" in final and "job_id='j'" in final  # both changes, one after the other


def test_a_commit_gives_up_with_a_conflict_error_when_attempts_run_out(pg_dsn):
    backoff, pauses = recording_backoff(max_attempts=1)
    final, error = _blocked_commit(pg_dsn, backoff)
    assert isinstance(error, CommitConflictError) and "1 attempts" in str(error)
    assert isinstance(error.__cause__, psycopg.errors.SerializationFailure)
    assert "job_id=None" in final and pauses == []


@pytest.mark.parametrize("error", [psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected,
                                   psycopg.errors.InvalidSqlStatementName])
def test_transient_database_errors_are_retried(pg_dsn, monkeypatch, error):
    backoff, pauses = recording_backoff()
    real = pg_store.commit_attempt
    failures = [error("injected")]

    def flaky(conn, *args):
        if failures:
            raise failures.pop()
        return real(conn, *args)

    monkeypatch.setattr(pg_store, "commit_attempt", flaky)
    with PostgresStateStore(pg_dsn, backoff=backoff) as store:
        table_id = store.create_table("t", SCHEMA, partitions_from_split_points(SCHEMA)).table_id
        store.commit(table_id, AddFiles((FileReference("f", "root", 1),)))
        assert set(store.load_state(table_id).files) == {"f"}
    assert not failures


def test_a_refused_transaction_is_not_retried(pg_dsn):
    backoff, pauses = recording_backoff()
    with PostgresStateStore(pg_dsn, backoff=backoff) as store:
        table_id = store.create_table("t", SCHEMA, partitions_from_split_points(SCHEMA)).table_id
        with pytest.raises(FileReferenceError):
            store.commit(table_id, AssignJobIds((JobAssignment("j", "root", ("missing",)),)))
    assert pauses == []


# ----- O(size of the change) ------------------------------------------------------------------
def test_a_commit_loads_and_writes_only_the_rows_it_touches(pg_dsn, monkeypatch):
    with PostgresStateStore(pg_dsn) as store:
        parts = partitions_from_split_points(SCHEMA, list(range(1, 64)))
        leaves = [p.id for p in parts if p.is_leaf]
        table_id = store.create_table("big", SCHEMA, parts).table_id
        store.commit(table_id, AddFiles(tuple(FileReference(f"old{i}", leaves[i % 64], 1) for i in range(3000))))
        store.commit(table_id, AddFiles((FileReference("shared", leaves[0], 1), FileReference("shared", leaves[1], 1))))
        store.commit(table_id, AssignJobIds((JobAssignment("j", leaves[0], ("old0", "shared")),)))

        loaded: list[tuple[int, int]] = []
        written: list[dict[str, int]] = []
        fill, write = pg_commits.fill_fragment, pg_diff.Diff.write
        monkeypatch.setattr(pg_commits, "fill_fragment",
                            lambda p, f: loaded.append((len(p), len(f))) or fill(p, f))
        monkeypatch.setattr(pg_diff.Diff, "write", lambda self, cur, tid: written.append(
            {k: len(v) for k, v in vars(self).items() if v}) or write(self, cur, tid))

        store.commit(table_id, ReplaceFileReferences("j", leaves[0], ("old0", "shared"),
                                                     FileReference("new", leaves[0], 2)))
        # one partition; old0's one reference row, shared's two, and "new" (absent): nothing else
        assert loaded == [(1, 3)]
        assert written == [{"r_del": 2, "r_ins": 1, "f_ins": 1, "f_upd": 2}]
        assert store.load_state(table_id).reference_count("shared") == 1


# ----- the embedded server ---------------------------------------------------------------------
def test_embedded_server_starts_with_a_sleeper_database_and_stops(server_dir):
    pg = EmbeddedPostgres(server_dir / "pg", cleanup_mode="delete")
    with pytest.raises(StateStoreUnavailableError, match="not started"):
        pg.dsn  # noqa: B018
    with pg:
        assert pg.running and "sleeper" in pg.dsn
        with PostgresStateStore(pg.dsn) as store:
            store.create_table("t", SCHEMA, partitions_from_split_points(SCHEMA))
            assert [t.name for t in store.list_tables()] == ["t"]
        assert pg.start() == pg.dsn  # starting again is harmless
    assert not pg.running


def test_embedded_server_that_cannot_start_is_reported_as_unavailable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StateStoreUnavailableError, match="could not start the embedded PostgreSQL") as e:
        EmbeddedPostgres(blocker / "pg").start()
    assert e.value.__cause__ is not None


def test_embedded_server_refuses_an_unknown_cleanup_mode(tmp_path):
    with pytest.raises(ValueError, match="cleanup_mode"):
        EmbeddedPostgres(tmp_path / "pg", cleanup_mode="explode")
