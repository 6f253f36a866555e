"""Schema migrations: the numbered ``NNN_name.sql`` files of ``include/sql`` (shipped as
the package ``statestore.postgres.ddl``), applied once under an advisory lock."""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from pathlib import Path
from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel, sql
from psycopg import errors as pg_errors

from statestore.errors import StateStoreUnavailableError

#: ``include/sql`` of the checkout, shipped in the wheel as the package ``statestore.postgres.ddl``.
MIGRATIONS_DIR = Path(str(importlib.resources.files("statestore.postgres.ddl")))

_MIGRATION_RE = re.compile(r"^(\d+)_[A-Za-z0-9_.-]*\.sql$")

MIGRATION_LOCK_KEY = int.from_bytes(hashlib.sha256(b"sleeper.statestore.migrations").digest()[:8], "big", signed=True)

def create_database_if_missing(dsn: str, database: str) -> None:
    """Create ``database`` on the server of ``dsn`` (any database there) if it is missing."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone()
            if exists is None:
                try:
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
                except (pg_errors.DuplicateDatabase, pg_errors.UniqueViolation):
                    pass  # created concurrently by another process
    except psycopg.OperationalError as e:
        raise StateStoreUnavailableError(f"could not create database {database!r}: {e}") from e

def migrations(migrations_dir: Optional[Path] = None) -> list[tuple[int, Path]]:
    """The numbered migrations ``NNN_name.sql`` in order."""
    d = migrations_dir or MIGRATIONS_DIR
    if not d.is_dir():
        raise StateStoreUnavailableError(f"the SQL migrations directory {d} is missing")
    out = []
    for p in d.iterdir():
        m = _MIGRATION_RE.match(p.name)
        if m:
            out.append((int(m.group(1)), p))
    out.sort()
    versions = [v for v, _ in out]
    if len(set(versions)) != len(versions):
        raise StateStoreUnavailableError(f"two SQL migrations in {d} have the same number")
    return out

def migrate(conn: psycopg.Connection[Any], migrations_dir: Optional[Path] = None) -> list[int]:
    """Apply missing migrations in one transaction under an advisory lock, so that
    concurrent processes migrate once. ``conn`` must be in autocommit mode. Returns
    the versions applied here."""
    applied_now = []
    todo = migrations(migrations_dir)
    conn.isolation_level = IsolationLevel.READ_COMMITTED
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))
        conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                     " version integer PRIMARY KEY, name text NOT NULL,"
                     " applied_at timestamptz NOT NULL DEFAULT now())")
        done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
        for version, path in todo:
            if version in done:
                continue
            conn.execute(path.read_text())  # no parameters: several statements
            conn.execute("INSERT INTO schema_migrations (version, name) VALUES (%s, %s)", (version, path.name))
            applied_now.append(version)
    return applied_now


def migrate_if_needed(conn: psycopg.Connection[Any], migrations_dir: Optional[Path] = None) -> list[int]:
    """:func:`migrate`, after a check in one statement without a lock or transaction
    (the common case: every migration applied, one round trip); ``conn`` in autocommit
    mode. Returns the versions applied here."""
    wanted = {v for v, _ in migrations(migrations_dir)}
    try:
        row = conn.execute("SELECT array_agg(version) FROM schema_migrations").fetchone()
    except pg_errors.UndefinedTable:
        row = None
    if row is not None and wanted <= set(row[0] or ()):
        return []
    return migrate(conn, migrations_dir)
