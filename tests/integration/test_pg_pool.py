"""The test database pool (tests/pg_pool.py) hands each test an empty migrated database
that no earlier test can reach, and reuses a database only when it is as the template left it."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from statestore import Schema, partitions_from_split_points
from statestore.backends import open_state_store
from tests.pg_pool import DatabasePool

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}]})


def _dsn(pool: DatabasePool, name: str) -> str:
    return make_conninfo(pool.admin_dsn, dbname=name)


def _databases(pool: DatabasePool) -> set[str]:
    with psycopg.connect(pool.admin_dsn) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database")}


def test_a_used_database_comes_back_empty_under_a_new_name_and_its_old_name_reaches_nothing(pg_pool, tmp_path):
    pool = DatabasePool(pg_pool.admin_dsn, pg_pool.template)
    try:
        first = pool.take()
        store = open_state_store("postgres", dsn=_dsn(pool, first))
        store.create_table("t", SCHEMA, partitions_from_split_points(SCHEMA))
        lingering = psycopg.connect(_dsn(pool, first), autocommit=True)  # a session the test left open
        lingering.execute("SELECT nextval('write_buffer_seq')")
        store.close()
        pool.give_back(first)
        with pytest.raises(psycopg.OperationalError):
            lingering.execute("SELECT 1")
        assert len(pool.free) == 1 and first not in _databases(pool)

        second = pool.take()
        assert second != first and pool.free == []
        with psycopg.connect(_dsn(pool, second)) as conn:
            assert conn.execute("SELECT count(*) FROM tables").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(pool.kept_rows) > 0
            assert conn.execute("SELECT nextval('write_buffer_seq')").fetchone()[0] == 1
        with pytest.raises(psycopg.OperationalError, match="does not exist"):
            psycopg.connect(_dsn(pool, first))
        pool.give_back(second)
    finally:
        pool.close()
    assert not [d for d in _databases(pool) - set(pg_pool.free) if d.startswith("sleeper_pool_")]


def test_a_database_whose_schema_a_test_changed_is_dropped_not_reused(pg_pool):
    pool = DatabasePool(pg_pool.admin_dsn, pg_pool.template)
    try:
        name = pool.take()
        with psycopg.connect(_dsn(pool, name), autocommit=True) as conn:
            conn.execute("CREATE TABLE left_behind (x int)")
        pool.give_back(name)
        assert pool.free == []
        assert not [d for d in _databases(pool) - set(pg_pool.free) if d.startswith("sleeper_pool_") or d == name]
    finally:
        pool.close()
