"""Idempotency keys of client writes in PostgreSQL (migration 007;
:mod:`statestore.client_writes`): the one place every keyed writer records its key.

A keyed write inserts its ``client_writes`` row in the same transaction as the write
(:func:`record_key` in a transaction; the buffer puts the insert in its one statement,
:data:`KEYED_APPEND`). A repeat finds the key taken (the buffer's statement fails on
the primary key, which rolls the whole write back); the writer then reads the first
write's row (:func:`earlier_on`) and answers with it. A write retried after its
connection was lost therefore finds its own earlier write, so such a write may be
retried on a fresh connection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import psycopg
from psycopg import IsolationLevel

from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import require_table_id

if TYPE_CHECKING:
    from statestore.roles import IngestQueue

_SELECT = ("SELECT request_id, digest, seq, answer, written_ms FROM client_writes"
           " WHERE table_id = %s AND request_id = %s")

#: the buffer's INSERT with its key row, in one statement (one transaction): a repeated
#: key fails the whole statement with a unique violation
KEYED_APPEND = (
    "WITH held AS (SELECT coalesce(sum(rows), 0) AS n FROM write_buffer WHERE table_id = %(t)s),"
    " entry AS (INSERT INTO write_buffer (table_id, seq, rows, written_ms, data)"
    "  SELECT %(t)s, nextval('write_buffer_seq'), %(rows)s, %(ms)s, %(data)b FROM held"
    "  WHERE held.n + %(rows)s <= %(most)s RETURNING seq)"
    " INSERT INTO client_writes (table_id, request_id, digest, seq, answer, written_ms)"
    " SELECT %(t)s, %(key)s, %(digest)s, seq, '', %(ms)s FROM entry"
    " RETURNING seq")


def record_key(cur: psycopg.Cursor[Any], table_id: str, write: ClientWrite,
               written_ms: int) -> Optional[ClientWriteRecord]:
    """Insert ``write``'s key row in the caller's transaction (READ COMMITTED) and
    return None; or, when the table holds the key already, insert nothing and return
    the first write's record (checked against the digest: the caller then writes
    nothing). A concurrent first write of the key is waited for."""
    while True:
        cur.execute("INSERT INTO client_writes (table_id, request_id, digest, seq, answer, written_ms)"
                    " VALUES (%s, %s, %s, 0, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                    (table_id, write.request_id, write.digest, write.answer, written_ms))
        if cur.fetchone() is not None:
            return None
        earlier = earlier_on(cur, table_id, write)
        if earlier is not None:
            return earlier


def earlier_on(cur: psycopg.Cursor[Any] | psycopg.Connection[Any], table_id: str,
               write: ClientWrite) -> Optional[ClientWriteRecord]:
    """The first write of ``write``'s key, checked against its digest, read on the
    caller's connection after an insert found the key taken (None: forgotten in
    between, its window over: the caller writes again)."""
    row = cur.execute(_SELECT, (table_id, write.request_id)).fetchone()
    return None if row is None else _record(row).answer_for(table_id, write)


def _record(row: Any) -> ClientWriteRecord:
    return ClientWriteRecord(str(row[0]), str(row[1]), int(row[2]), str(row[3]), int(row[4]))


class PostgresClientWrites:
    """The client writes' keys of :class:`~statestore.postgres.store.PostgresStateStore`; a key
    is claimed alone by queuing no ingest requests with it (one transaction)."""

    def __init__(self, db: PostgresConnection, queue: IngestQueue) -> None:
        self._db = db
        self._queue = queue

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[ClientWriteRecord]:
            row = cur.execute(_SELECT, (table_id, request_id)).fetchone()
            if row is None:
                require_table_id(cur, table_id)
            return None if row is None else _record(row)

        return self._db.run(f"read idempotency key {request_id!r} of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        return self._queue.add_ingest_requests(table_id, (), client_write=write)

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        def fn(cur: psycopg.Cursor[Any]) -> int:
            require_table_id(cur, table_id)
            cur.execute("DELETE FROM client_writes WHERE table_id = %s AND written_ms < %s", (table_id, before_ms))
            return cur.rowcount

        return self._db.run(f"forget old idempotency keys of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)
