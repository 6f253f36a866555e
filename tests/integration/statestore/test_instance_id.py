"""The state store's instance id (``StateStore.instance_id``): one UUID per store, kept in
the store itself, the same for every process and every spelling of its address, created
once even when processes open a fresh store at the same time, never rewritten."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any, Callable

import pytest

from statestore import StateStore
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, dynamodb_options


def test_the_id_is_a_uuid_and_stays_the_same(store: StateStore) -> None:
    first = store.instance_id()
    assert str(uuid.UUID(first)) == first
    assert store.instance_id() == first
    assert store.catalog.instance_id() == first  # type: ignore[attr-defined]


def _race(open_store: Callable[[], StateStore], n: int = 4) -> set[str]:
    """``instance_id`` of ``n`` stores opened at once, each in its own thread."""
    barrier = threading.Barrier(n)
    ids: list[str] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            s = open_store()
            try:
                barrier.wait()
                ids.append(s.instance_id())
            finally:
                s.close()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(ids) == n
    return set(ids)


@pytest.mark.integration
def test_postgres_two_spellings_of_one_database_and_a_reopen_give_one_id(pg_dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from statestore.postgres import PostgresStateStore

    parts = conninfo_to_dict(pg_dsn)
    keywords = make_conninfo("", **{k: v for k, v in parts.items() if v is not None})
    uri = f"postgresql://{parts.get('user', 'postgres')}@/{parts['dbname']}?host={parts.get('host', '')}"
    with PostgresStateStore(keywords) as a, PostgresStateStore(uri) as b:
        first = a.instance_id()
        assert b.instance_id() == first
    with PostgresStateStore(pg_dsn) as again:
        assert again.instance_id() == first


@pytest.mark.integration
def test_postgres_concurrent_first_opens_of_a_fresh_database_make_one_id(pg_empty_dsn: str) -> None:
    """Migration and id creation race: four processes' stores opening an empty database."""
    from statestore.postgres import PostgresStateStore

    assert len(_race(lambda: PostgresStateStore(pg_empty_dsn))) == 1


@pytest.mark.integration
def test_postgres_a_missing_row_is_made_once_and_an_existing_one_never_rewritten(pg_dsn: str) -> None:
    """The pooled test databases start without the row (tests/conftest.py): the stores
    racing for it end with one id, and migrating again keeps it."""
    import psycopg

    from statestore.postgres import PostgresStateStore, migrate

    (found,) = _race(lambda: PostgresStateStore(pg_dsn))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_migrations WHERE version = 11")
        migrate(conn)  # 011 again: the id it finds stays
        assert conn.execute("SELECT instance_id FROM sleeper_instance").fetchall() == [(found,)]


@pytest.mark.integration
def test_dynamodb_reopen_and_concurrent_first_opens_give_one_id(moto_endpoint_url: str, tmp_path: Path) -> None:
    from statestore.dynamodb import open_dynamodb

    options: dict[str, Any] = dynamodb_options(moto_endpoint_url, tmp_path / "blobs")
    assert options["region"] == MOTO_CREDENTIALS["region"]
    (found,) = _race(lambda: open_dynamodb(**options))
    with open_dynamodb(**options) as again:
        assert again.instance_id() == found
    other = {**options, "table_prefix": f"t{uuid.uuid4().hex[:12]}-"}
    with open_dynamodb(**other) as elsewhere:
        assert elsewhere.instance_id() != found
