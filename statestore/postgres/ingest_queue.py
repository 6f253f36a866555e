"""The ingest request queue (migration 003): requests queued per table, assigned to a job
atomically (rows locked in one order), then ingested, or back to pending on failure
until their attempts run out."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import psycopg
from psycopg import IsolationLevel
from psycopg import errors as pg_errors

from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.clock import now_ms
from statestore.errors import TableNotFoundError
from statestore.ingest_requests import INGEST_REQUEST_STATUSES, IngestRequest, IngestRequestError, check_new_requests
from statestore.postgres.client_writes import record_key
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import INGEST_REQUEST_COLUMNS, require_table_id


class PostgresIngestQueue:
    """The ingest queue of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    # ----- ingest requests (migration 003; delete_table removes them by ON DELETE CASCADE) ---
    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        new = check_new_requests(table_id, requests)
        if not new and client_write is None:
            return None
        columns = ([r.request_id for r in new], [r.filename for r in new], [r.size_bytes for r in new],
                   [r.received_ms for r in new])

        def fn(cur: psycopg.Cursor[Any]) -> Optional[ClientWriteRecord]:
            require_table_id(cur, table_id)
            if client_write is not None:
                earlier = record_key(cur, table_id, client_write, now_ms())
                if earlier is not None:
                    return earlier
            try:
                cur.execute("INSERT INTO ingest_requests (table_id, request_id, filename, size_bytes, received_ms,"
                            " status) SELECT %s, r.*, 'pending'"
                            " FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[]) AS r",
                            (table_id, *columns))
            except pg_errors.UniqueViolation as e:
                raise IngestRequestError(f"an ingest request of table {table_id} is already queued: "
                                         f"{e.diag.message_detail or e}") from e
            except pg_errors.ForeignKeyViolation as e:
                raise TableNotFoundError(f"no table with id {table_id}") from e
            return None

        return self._db.run(f"queue {len(new)} ingest requests for table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, idempotent=client_write is not None)

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.list_ingest_requests(table_id, status="pending", limit=limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        ids = sorted(set(request_ids))

        def fn(cur: psycopg.Cursor[Any]) -> bool:
            # Lock the rows in one order (no deadlocks between assigners); under READ
            # COMMITTED a row changed meanwhile is seen as it is after that change.
            cur.execute("SELECT status FROM ingest_requests WHERE table_id = %s AND request_id = ANY(%s)"
                        " ORDER BY request_id FOR UPDATE", (table_id, ids))
            rows = cur.fetchall()
            if len(rows) != len(ids) or any(r[0] != "pending" for r in rows):
                require_table_id(cur, table_id)
                return False
            cur.execute("UPDATE ingest_requests SET status = 'assigned', job_id = %s"
                        " WHERE table_id = %s AND request_id = ANY(%s)", (job_id, table_id, ids))
            return True

        return self._db.run(f"assign ingest requests of table {table_id} to job {job_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int:
        def fn(cur: psycopg.Cursor[Any]) -> int:
            if ok:
                cur.execute("UPDATE ingest_requests SET status = 'ingested'"
                            " WHERE table_id = %s AND job_id = %s AND status = 'assigned'", (table_id, job_id))
            else:
                cur.execute(
                    "UPDATE ingest_requests SET attempts = attempts + %(add)s, last_error = %(error)s,"
                    " status = CASE WHEN %(add)s = 1 AND attempts + 1 >= %(max)s THEN 'failed' ELSE 'pending' END,"
                    " job_id = CASE WHEN %(add)s = 1 AND attempts + 1 >= %(max)s THEN job_id END"
                    " WHERE table_id = %(t)s AND job_id = %(job)s AND status = 'assigned'",
                    {"error": error, "max": max_attempts, "t": table_id, "job": job_id, "add": 1 if counted else 0})
            n = cur.rowcount
            if not n:
                require_table_id(cur, table_id)
            return n

        return self._db.run(f"finish ingest job {job_id} of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        if status is not None and status not in INGEST_REQUEST_STATUSES:
            raise IngestRequestError(f"unknown ingest request status {status!r}")

        def fn(cur: psycopg.Cursor[Any]) -> list[IngestRequest]:
            cur.execute(f"SELECT {INGEST_REQUEST_COLUMNS} FROM ingest_requests"
                        " WHERE table_id = %s AND (%s::text IS NULL OR status = %s)"
                        " ORDER BY received_ms, request_id LIMIT %s",
                        (table_id, status, status, None if limit is None else max(0, limit)))
            rows = cur.fetchall()
            if not rows:
                require_table_id(cur, table_id)
            return [IngestRequest(*r) for r in rows]

        return self._db.run(f"list ingest requests of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)
