"""Incremental reads (:mod:`statestore.changes`) in PostgreSQL: the ``state_changes`` log
(``include/sql/005_state_changes.sql``).

* A commit that changes partitions or references inserts one log row in its own
  database transaction (:func:`statestore.postgres.diff.log_change`): its transaction id and the partition ids
  and filenames whose rows it changed.
* A reader's token is the PostgreSQL snapshot its copy is exact at. A read
  (:meth:`PostgresChanges.changes_since`) sends, in one pipeline and one REPEATABLE READ
  transaction, the catalog row with the current snapshot, the log rows of transactions
  that snapshot sees and the held one did not (an index range scan from the held
  snapshot's xmin), and the prune horizon; when nothing changed, one statement doing
  the same (:func:`_unchanged`) is all. Otherwise a second transaction does the same and then reads, by primary key,
  the current rows of the partitions and files named (or the whole state, when a log
  row says ``all_rows`` or rows the reader needed were pruned).
* A reader holding no token (a first query) gets the whole state and the write buffer's
  mark in one pipeline: one round trip (:func:`_whole_at_once`).

Log rows are pruned after :data:`CHANGE_RETENTION_MS` (by ``prune_commit_ids``, which
garbage collection runs); a reader that has not read for longer reloads the whole state.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel

from statestore.changes import TableChanges, is_token_of
from statestore.errors import TableNotFoundError
from statestore.files import FileReference
from statestore.postgres.commits import pipelined, rollback_quietly
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import (
    PARTITION_COLUMNS,
    REF_COLUMNS,
    TOMBSTONES,
    fill_tombstones,
    gc_paused,
    partition_from_row,
    require_table_id,
    table_info,
)
from statestore.state import TableState

#: log rows older than this are pruned; a reader idle for longer reloads the whole state
CHANGE_RETENTION_MS = 30 * 60 * 1000

_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"


def prune_changes(cur: psycopg.Cursor[Any], table_id: str, before_ms: int) -> int:
    """Delete the table's log rows applied before ``before_ms``, raising its prune
    horizon to the largest transaction id deleted; returns how many were deleted."""
    row = cur.execute(
        "WITH gone AS (DELETE FROM state_changes WHERE table_id = %s AND applied_ms < %s RETURNING xid)"
        " SELECT count(*), max(xid) FROM gone", (table_id, before_ms)).fetchone()
    count, newest = row if row is not None else (0, None)
    if newest is not None:
        cur.execute("INSERT INTO state_change_horizon (table_id, pruned_xid) VALUES (%s, %s)"
                    " ON CONFLICT (table_id) DO UPDATE SET pruned_xid ="
                    " GREATEST(state_change_horizon.pruned_xid, EXCLUDED.pruned_xid)", (table_id, newest))
    return int(count)


class PostgresChanges:
    """The incremental reads of :class:`~statestore.postgres.store.PostgresStateStore` (part of
    its table commits role)."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    def transaction_number(self, table_id: str) -> int:
        """See :meth:`StateStore.transaction_number`: the largest transaction id in the
        table's change log, its prune horizon or its history (a commit logs its own id;
        pruning keeps the largest it removed), so the number never goes back; it is the
        number of the table's newest transaction in :meth:`history`."""

        def fn(cur: psycopg.Cursor[Any]) -> int:
            require_table_id(cur, table_id)
            cur.execute("SELECT greatest((SELECT max(xid)::text::bigint FROM state_changes WHERE table_id = %s),"
                        " (SELECT pruned_xid::text::bigint FROM state_change_horizon WHERE table_id = %s),"
                        " (SELECT max(number) FROM table_history WHERE table_id = %s))",
                        (table_id, table_id, table_id))
            row = cur.fetchone()
            return int(row[0]) if row and row[0] is not None else 0

        return self._db.run(f"read the transaction number of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def changes_since(self, table_id: str, since: Any = None) -> TableChanges:
        """See :meth:`StateStore.changes_since` and the module docstring."""
        held = is_token_of(since, "postgres")
        snapshot: Optional[str] = held[0] if held else None
        what = f"read the changes of table {table_id}"
        if snapshot is None:
            return self._db.retrying(what, lambda conn: _whole_at_once(conn, table_id), idempotent=True)
        quick = self._db.retrying(what, lambda conn: _unchanged(conn, table_id, snapshot), idempotent=True)
        if quick is not None:
            return quick
        out = self._db.retrying(what, lambda conn: _attempt(conn, table_id, snapshot, rows=True), idempotent=True)
        assert out is not None
        return out


#: the write buffer's mark of table ``t`` (flushes, entries, highest seq), three columns
#: (:attr:`TableChanges.buffer_mark`; :func:`_mark` reads them)
_MARK_COLUMNS = (
    "coalesce((SELECT f.flushes FROM write_buffer_flushes f WHERE f.table_id = t.table_id), 0),"
    " (SELECT count(*) FROM write_buffer b WHERE b.table_id = t.table_id),"
    " coalesce((SELECT max(b.seq) FROM write_buffer b WHERE b.table_id = t.table_id), 0)")

_UNCHANGED = (
    "SELECT t.table_id, t.name, t.schema, t.properties, pg_current_snapshot()::text,"
    " EXISTS (SELECT 1 FROM state_changes c WHERE c.table_id = t.table_id"
    " AND c.xid >= pg_snapshot_xmin(%(held)s::pg_snapshot)"
    " AND NOT pg_visible_in_snapshot(c.xid, %(held)s::pg_snapshot)),"
    " COALESCE((SELECT h.pruned_xid >= pg_snapshot_xmin(%(held)s::pg_snapshot) FROM state_change_horizon h"
    " WHERE h.table_id = t.table_id), false), " + _MARK_COLUMNS +
    " FROM tables t WHERE t.table_id = %(table)s")


def _mark(columns: Any) -> tuple[int, int, int]:
    """The buffer mark from the three columns of :data:`_MARK_COLUMNS`."""
    return int(columns[0]), int(columns[1]), int(columns[2])


def _unchanged(conn: psycopg.Connection[Any], table_id: str, snapshot: str) -> Optional[TableChanges]:
    """The answer when nothing changed since ``snapshot`` (else None), in one statement
    on the autocommit connection: its subqueries and ``pg_current_snapshot()`` share the
    statement's one snapshot, so this is the quick read of :func:`_attempt` in one round
    trip and one statement instead of five. It carries the write buffer's mark
    (:attr:`TableChanges.buffer_mark`), so a reader whose buffer copy is current needs
    no second round trip."""
    row = conn.execute(_UNCHANGED, {"held": snapshot, "table": table_id}).fetchone()
    if row is None:
        raise TableNotFoundError(f"no table with id {table_id}")
    if row[5] or row[6]:
        return None
    return TableChanges(table_info(row[:4]), ("postgres", row[4]), False, buffer_mark=_mark(row[7:10]))


def _whole_at_once(conn: psycopg.Connection[Any], table_id: str) -> TableChanges:
    """The whole state (a reader holding no token), in one REPEATABLE READ transaction
    and one round trip: every statement, COMMIT included, goes in one pipeline. It
    carries the write buffer's mark, so a first query needs no second read of the
    buffer (:meth:`~statestore.changes.TableChanges.buffer_mark`)."""
    def send() -> tuple[Any, list[Any], list[Any], Any]:
        conn.execute(_BEGIN)
        table = conn.execute("SELECT t.table_id, t.name, t.schema, t.properties, pg_current_snapshot()::text, "
                             + _MARK_COLUMNS + " FROM tables t WHERE t.table_id = %s", (table_id,))
        parts = conn.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
        refs = conn.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
        tombstones = conn.execute(TOMBSTONES, (table_id,))
        conn.execute("COMMIT")
        with gc_paused():
            return table.fetchone(), parts.fetchall(), refs.fetchall(), tombstones.fetchone()

    try:
        row, parts, refs, tombstones = pipelined(conn, send)
    except BaseException:
        rollback_quietly(conn)
        raise
    if row is None:
        raise TableNotFoundError(f"no table with id {table_id}")
    with gc_paused():
        whole = TableChanges.whole(table_info(row[:4]), ("postgres", row[4]), _state_of(parts, refs, tombstones))
    return replace(whole, buffer_mark=_mark(row[5:8]))


def _attempt(conn: psycopg.Connection[Any], table_id: str, snapshot: Optional[str], *,
             rows: bool) -> Optional[TableChanges]:
    """One read in one transaction. Without ``rows``, the answer only when nothing
    changed since ``snapshot`` (else None)."""
    def first() -> tuple[Optional[Any], list[Any], Optional[Any]]:
        conn.execute(_BEGIN)
        table = conn.execute("SELECT table_id, name, schema, properties, pg_current_snapshot()::text"
                             " FROM tables WHERE table_id = %s", (table_id,))
        log = horizon = None
        if snapshot is not None:
            log = conn.execute(
                "SELECT all_rows, partition_ids, filenames FROM state_changes WHERE table_id = %s"
                " AND xid >= pg_snapshot_xmin(%s::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, %s::pg_snapshot)",
                (table_id, snapshot, snapshot))
            horizon = conn.execute("SELECT pruned_xid >= pg_snapshot_xmin(%s::pg_snapshot) FROM state_change_horizon"
                                   " WHERE table_id = %s", (snapshot, table_id))
        if not rows:
            conn.execute("COMMIT")
        return (table.fetchone(), log.fetchall() if log is not None else [],
                horizon.fetchone() if horizon is not None else None)

    try:
        row, log, horizon = pipelined(conn, first)
        if row is None:
            raise TableNotFoundError(f"no table with id {table_id}")
        info, token = table_info(row[:4]), ("postgres", row[4])
        full = snapshot is None or bool(horizon and horizon[0]) or any(r[0] for r in log)
        if not rows:
            return None if full or log else TableChanges(info, token, False)
        if full:
            out = _read_whole(conn, table_id, info, token)
        else:
            pids = {p for r in log for p in r[1]}
            names = {f for r in log for f in r[2]}
            out = _read_rows(conn, table_id, info, token, pids, names)
        conn.execute("COMMIT")
        return out
    except BaseException:
        rollback_quietly(conn)
        raise


def _read_whole(conn: psycopg.Connection[Any], table_id: str, info: Any, token: Any) -> TableChanges:
    parts = conn.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,)).fetchall()
    with gc_paused():
        refs = conn.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s",
                            (table_id,)).fetchall()
        tombstones = conn.execute(TOMBSTONES, (table_id,)).fetchone()
        return TableChanges.whole(info, token, _state_of(parts, refs, tombstones))


def _state_of(parts: Any, refs: Any, tombstones: Any) -> TableState:
    """The table state held by its partition, reference and tombstone rows."""
    state = TableState()
    for p in parts:
        part = partition_from_row(p)
        state.partitions[part.id] = part
    for r in refs:
        state.put_reference(FileReference(*r))
    fill_tombstones(state, tombstones)
    return state


def _read_rows(conn: psycopg.Connection[Any], table_id: str, info: Any, token: Any, pids: set[str],
               names: set[str]) -> TableChanges:
    parts: list[Any] = []
    refs: list[Any] = []
    if pids:
        parts = conn.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s"
                             " AND partition_id = ANY(%s)", (table_id, list(pids))).fetchall()
    if names:
        refs = conn.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s AND filename = ANY(%s)",
                            (table_id, list(names))).fetchall()
    tombstones = fill_tombstones(TableState(), conn.execute(TOMBSTONES, (table_id,)).fetchone()).tombstones
    return TableChanges(info, token, False, frozenset(pids), tuple(partition_from_row(p) for p in parts),
                        frozenset(names), tuple(FileReference(*r) for r in refs), tuple(tombstones.values()))
