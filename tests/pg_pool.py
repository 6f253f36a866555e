"""Fresh migrated databases for tests, reused instead of created and dropped each time.

``CREATE DATABASE ... TEMPLATE`` copies the template's system catalogs (several MB):
about 0.05 s of the server's CPU on an idle machine and 0.2 s in a parallel test run,
where it was 50 s of a run's CPU for about 250 databases (process accounting over a
whole ``make test``). Emptying a used database costs a few milliseconds.

A database a test is done with is taken out of reach first: every session still on it
is terminated and the database is renamed to a name only this pool knows (a renamed
database cannot be reached through its old name, so a process the test left behind
cannot write into the next test's data, just as it could not after a drop). Then it is
checked against the template: the same relations, functions and schemas, no prepared
transaction and no per-database setting. Only then are its tables emptied (all but
``schema_migrations``, which must hold the template's rows) and its sequences
restarted, and it waits for the next test, which gets it under a new unique name. A
database that fails any check, or that a session reaches between the termination and
the rename, is dropped instead (``DROP ... WITH (FORCE)``), as before.
"""

from __future__ import annotations

import uuid
from typing import Any

KEPT_TABLE = "schema_migrations"

_SIGNATURE = """
SELECT n.nspname, c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%%'
  AND n.nspname NOT LIKE 'pg_temp%%'
UNION ALL
SELECT n.nspname, p.proname, 'f' FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')
UNION ALL
SELECT nspname, '', 'n' FROM pg_namespace WHERE nspname NOT LIKE 'pg_%%' AND nspname <> 'information_schema'
ORDER BY 1, 2, 3
"""


def _connect(dsn: str) -> Any:
    import psycopg

    return psycopg.connect(dsn, autocommit=True)


def _dsn(admin_dsn: str, name: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(admin_dsn, dbname=name)


def create_database(admin_dsn: str, name: str, template: str | None = None) -> str:
    """Create database ``name`` (a copy of ``template``, if given); its DSN."""
    from psycopg import sql

    stmt = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template is not None:
        stmt = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(sql.Identifier(name), sql.Identifier(template))
    with _connect(admin_dsn) as admin:
        admin.execute(stmt)
    return _dsn(admin_dsn, name)


def drop_database(admin_dsn: str, name: str) -> None:
    """Drop database ``name`` if it exists, ending any session on it."""
    from psycopg import sql

    with _connect(admin_dsn) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class DatabasePool:
    """Databases cloned from ``template`` on the server of ``admin_dsn``, one pool per
    test session (per xdist worker)."""

    def __init__(self, admin_dsn: str, template: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = template
        self.free: list[str] = []
        with _connect(_dsn(admin_dsn, template)) as conn:
            self.signature = conn.execute(_SIGNATURE).fetchall()
            self.kept_rows = conn.execute(f"SELECT * FROM {KEPT_TABLE} ORDER BY 1").fetchall()
            self.tables = [r for _, r, k in self.signature if k in ("r", "p") and r != KEPT_TABLE]
            self.sequences = [r for _, r, k in self.signature if k == "S"]

    def take(self) -> str:
        """The name of a fresh migrated database of the caller's own."""
        from psycopg import sql

        name = f"sleeper_test_{uuid.uuid4().hex[:12]}"
        if not self.free:
            create_database(self.admin_dsn, name, self.template)
            return name
        with _connect(self.admin_dsn) as admin:
            admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(self.free.pop()),
                                                                          sql.Identifier(name)))
        return name

    def give_back(self, name: str) -> None:
        """``name`` is no longer used: emptied and kept for the next test when it passes
        every check of the module docstring, else dropped."""
        from psycopg import errors, sql

        parked = f"sleeper_pool_{uuid.uuid4().hex[:12]}"
        with _connect(self.admin_dsn) as admin:
            self._end_sessions(admin, name)
            try:
                admin.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(name),
                                                                              sql.Identifier(parked)))
            except (errors.ObjectInUse, errors.InvalidCatalogName):
                drop_database(self.admin_dsn, name)
                return
            if self._reset(admin, parked):
                self.free.append(parked)
            else:
                drop_database(self.admin_dsn, parked)

    @staticmethod
    def _end_sessions(admin: Any, name: str, wait_seconds: float = 2.0) -> None:
        """Terminate every session on ``name``, each call waiting until its backend has
        exited (``pg_terminate_backend``'s timeout, PostgreSQL 14+), all within
        ``wait_seconds``: termination is a signal, and a rename fails while one remains
        (a session still there, or a new one, makes the rename fail and the caller drop
        the database)."""
        import time

        deadline = time.monotonic() + wait_seconds
        pids = [r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                                            "AND pid <> pg_backend_pid()", (name,)).fetchall()]
        for pid in pids:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0:
                return
            # a backend already gone is a warning (a notice), not an error
            admin.execute("SELECT pg_terminate_backend(%s, %s)", (pid, left_ms))

    def _reset(self, admin: Any, name: str) -> bool:
        from psycopg import sql

        settings = admin.execute("SELECT count(*) FROM pg_db_role_setting s JOIN pg_database d "
                                 "ON d.oid = s.setdatabase WHERE d.datname = %s", (name,)).fetchone()[0]
        prepared = admin.execute("SELECT count(*) FROM pg_prepared_xacts WHERE database = %s", (name,)).fetchone()[0]
        if settings or prepared:
            return False
        with _connect(_dsn(self.admin_dsn, name)) as conn:
            if conn.execute(_SIGNATURE).fetchall() != self.signature:
                return False
            if conn.execute(f"SELECT * FROM {KEPT_TABLE} ORDER BY 1").fetchall() != self.kept_rows:
                return False
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(sql.Identifier(t) for t in self.tables)))
            for seq in self.sequences:
                conn.execute(sql.SQL("ALTER SEQUENCE {} RESTART").format(sql.Identifier(seq)))
        return True

    def close(self) -> None:
        """Drop every database the pool holds."""
        while self.free:
            drop_database(self.admin_dsn, self.free.pop())
