"""The write buffer in PostgreSQL (migration 006; :mod:`statestore.buffer`).

A write is one INSERT, sent alone on an autocommit connection (one round trip): the
row is durable when the call returns. The backpressure check is in the same statement
(the sum of the table's buffered rows, read under READ COMMITTED), so concurrent
writers may together pass the limit by at most their own sizes. Reads take a
REPEATABLE READ snapshot of the entries and the table's flush count together. A
flush's removal of entries is part of its commit (:mod:`statestore.postgres.commits`).
"""

from __future__ import annotations

from typing import Any, Collection, Iterator, Optional

import psycopg
from psycopg import IsolationLevel
from psycopg import errors as pg_errors

from statestore.buffer import BufferEntry, BufferSnapshot, BufferStats, RecordBlob, full_message
from statestore.client_writes import ClientWrite
from statestore.clock import now_ms
from statestore.errors import BufferFullError, TableNotFoundError
from statestore.postgres.client_writes import KEYED_APPEND, earlier_on
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import require_table_id

#: "no limit" for the backpressure check
_UNLIMITED = 1 << 62

_APPEND = (
    "WITH held AS (SELECT coalesce(sum(rows), 0) AS n FROM write_buffer WHERE table_id = %(t)s)"
    " INSERT INTO write_buffer (table_id, seq, rows, written_ms, data)"
    " SELECT %(t)s, nextval('write_buffer_seq'), %(rows)s, %(ms)s, %(data)b FROM held"
    " WHERE held.n + %(rows)s <= %(most)s"
    " RETURNING seq")

#: the table's existence and flush count, and its entries (none: one row of NULLs), in one snapshot
_LIST = ("SELECT h.present, h.flushes, b.seq, b.rows, b.written_ms FROM"
         " (SELECT EXISTS (SELECT 1 FROM tables WHERE table_id = %(t)s) AS present,"
         "  coalesce((SELECT flushes FROM write_buffer_flushes WHERE table_id = %(t)s), 0) AS flushes) h"
         " LEFT JOIN write_buffer b ON b.table_id = %(t)s AND b.seq <= %(upto)s ORDER BY b.seq")

_FLUSHES = "SELECT coalesce((SELECT flushes FROM write_buffer_flushes WHERE table_id = %s), 0)"


class PostgresWriteBuffer:
    """The write buffer of :class:`~statestore.postgres.store.PostgresStateStore` (records in
    its rows only: no blobs)."""

    #: no limit on the entries one commit may remove
    buffer_max_flush_entries: Optional[int] = None

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        """See :meth:`StateStore.append_buffer`. A keyed write inserts its key row in
        the same statement (:mod:`statestore.postgres.client_writes`), so it is retried
        on a fresh connection after a lost one: the retry finds its own first write."""
        most = _UNLIMITED if max_rows is None else max_rows
        params: dict[str, Any] = {"t": table_id, "rows": rows, "ms": now_ms(), "data": data, "most": most}
        if client_write is not None:
            params.update(key=client_write.request_id, digest=client_write.digest)

        def attempt(conn: psycopg.Connection[Any]) -> Optional[int]:
            try:
                row = conn.execute(_APPEND if client_write is None else KEYED_APPEND, params,
                                   prepare=True).fetchone()
            except pg_errors.ForeignKeyViolation:
                raise TableNotFoundError(f"no table with id {table_id}") from None
            except pg_errors.UniqueViolation:
                assert client_write is not None
                earlier = earlier_on(conn, table_id, client_write)
                if earlier is None:  # forgotten in between: write it now
                    return attempt(conn)
                return earlier.seq
            return None if row is None else int(row[0])

        seq = self._db.retrying(f"write {rows} records to the buffer of table {table_id}", attempt,
                             idempotent=client_write is not None)
        if seq is not None:
            return seq
        stats = self.buffer_stats(table_id)  # raises TableNotFoundError for a missing table
        raise BufferFullError(full_message(table_id, stats.rows, rows, most))

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        """See :meth:`StateStore.read_buffer`. The list of entries and the flush count
        come from one statement (one snapshot, one round trip); the bytes wanted, from a
        second. Entries never change once written, so the second is consistent with
        the first unless a flush removed one of them in between: then both are read
        again."""
        def attempt(conn: psycopg.Connection[Any]) -> Optional[BufferSnapshot]:
            listed = conn.execute(_LIST, {"t": table_id, "upto": _UNLIMITED if up_to_seq is None else up_to_seq},
                                  prepare=True).fetchall()
            exists, flushes = listed[0][0], int(listed[0][1])
            if not exists:
                raise TableNotFoundError(f"no table with id {table_id}")
            chosen: list[tuple[int, int, int]] = []
            taken = 0
            for _, _, seq, rows, ms in listed:
                if seq is None or (chosen and ((max_rows is not None and taken >= max_rows)
                                               or (max_entries is not None and len(chosen) >= max_entries))):
                    break
                chosen.append((int(seq), int(rows), int(ms)))
                taken += rows
            wanted = [q for q, _, _ in chosen if q not in skip_data]
            data: dict[int, bytes] = {}
            if wanted:
                cur = conn.cursor(binary=True)
                cur.execute("SELECT seq, data FROM write_buffer WHERE table_id = %s AND seq = ANY(%s)",
                            (table_id, wanted))
                data = {int(q): bytes(d) for q, d in cur.fetchall()}
                if len(data) != len(wanted):
                    return None  # a flush took some in between: read again
            return BufferSnapshot(tuple(BufferEntry(q, r, ms, data.get(q)) for q, r, ms in chosen), flushes)

        while True:
            snap = self._db.retrying(f"read the write buffer of table {table_id}", attempt, idempotent=True)
            if snap is not None:
                return snap

    def buffer_high_water(self, table_id: str) -> int:
        """See :meth:`StateStore.buffer_high_water`: one index read, no entry's bytes."""
        def fn(cur: psycopg.Cursor[Any]) -> int:
            top = cur.execute("SELECT max(seq) FROM write_buffer WHERE table_id = %s", (table_id,)).fetchone()
            if top is None or top[0] is None:
                require_table_id(cur, table_id)
                return 0
            return int(top[0])

        return self._db.run(f"read the write buffer's last sequence number of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def buffer_stats(self, table_id: str) -> BufferStats:
        def fn(cur: psycopg.Cursor[Any]) -> BufferStats:
            n, rows, oldest = cur.execute(  # type: ignore[misc]
                "SELECT count(*), coalesce(sum(rows), 0), min(written_ms) FROM write_buffer WHERE table_id = %s",
                (table_id,), prepare=True).fetchone()
            flushes = int(cur.execute(_FLUSHES, (table_id,), prepare=True).fetchone()[0])  # type: ignore[index]
            if not n:
                require_table_id(cur, table_id)
            return BufferStats(int(n), int(rows), None if oldest is None else int(oldest), flushes)

        return self._db.run(f"read the write buffer stats of table {table_id}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]:
        """None: the records are in the rows only."""
        return iter(())
