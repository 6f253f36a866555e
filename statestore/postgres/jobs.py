"""Job status records: an upsert that never overwrites a committed record with anything
but a committed one, so a losing attempt cannot undo the winner's record, and that
takes saves after an attempt's start only from the current attempt (see
:meth:`statestore.store.StateStore.put_job`)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import psycopg
from psycopg import IsolationLevel, sql

from statestore.jobs import JobRecord
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import JOB_COLUMNS, job_from_row, require_table_id

_COLUMNS = list(JobRecord.__dataclass_fields__)
_UPSERT = sql.SQL("INSERT INTO jobs ({}) VALUES ({}) ON CONFLICT (table_id, job_id) DO UPDATE SET {}"
                  " WHERE (jobs.status <> 'committed' OR EXCLUDED.status = 'committed')"
                  " AND (EXCLUDED.status = 'started' OR jobs.outputs = '{{}}' OR jobs.outputs = EXCLUDED.outputs)"
                  ).format(
    sql.SQL(", ").join(map(sql.Identifier, _COLUMNS)),
    sql.SQL(", ").join(sql.Placeholder() * len(_COLUMNS)),
    sql.SQL(", ").join(sql.SQL("{0} = GREATEST(jobs.{0}, EXCLUDED.{0})" if c == "heartbeat_ms"
                               else "{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                       for c in _COLUMNS if c not in ("table_id", "job_id")))


def upsert_job(cur: psycopg.Cursor[Any], record: JobRecord) -> None:
    """Save ``record`` (in the caller's transaction); a committed record stays final."""
    d = record.to_dict()
    d["outputs"] = list(record.outputs)
    cur.execute(_UPSERT, [d[c] for c in _COLUMNS])


class PostgresJobs:
    """The job tracker of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    # ----- job status -----------------------------------------------------------------
    def put_job(self, record: JobRecord) -> None:
        def fn(cur: psycopg.Cursor[Any]) -> None:
            require_table_id(cur, record.table_id)
            upsert_job(cur, record)

        self._db.run(f"save job {record.job_id}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        def fn(cur: psycopg.Cursor[Any]) -> int:
            require_table_id(cur, table_id)
            cur.execute("UPDATE jobs SET heartbeat_ms = GREATEST(heartbeat_ms, %s)"
                        " WHERE table_id = %s AND job_id = ANY(%s)", (at_ms, table_id, list(job_ids)))
            return cur.rowcount

        return self._db.run(f"refresh {len(job_ids)} running jobs of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED)

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[JobRecord]:
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE table_id = %s AND job_id = %s", (table_id, job_id))
            row = cur.fetchone()
            return None if row is None else job_from_row(row)

        return self._db.run(f"read job {job_id}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> list[JobRecord]:
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE table_id = %s AND (%s::text IS NULL OR kind = %s)"
                        " ORDER BY created_ms DESC, job_id DESC LIMIT %s",  # LIMIT NULL: all
                        (table_id, kind, kind, None if limit is None else max(0, limit)))
            return [job_from_row(r) for r in cur.fetchall()]

        return self._db.run(f"list jobs of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED,
                         read_only=True)

    def open_jobs(self, table_id: str) -> list[JobRecord]:
        """See :meth:`StateStore.open_jobs`: the partial index ``jobs_in_flight``
        (migration 004) holds just these rows."""
        def fn(cur: psycopg.Cursor[Any]) -> list[JobRecord]:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE table_id = %s"
                        " AND status IN ('created', 'started', 'finished')", (table_id,))
            return [job_from_row(r) for r in cur.fetchall()]

        return self._db.run(f"list the open jobs of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED,
                         read_only=True)

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        def fn(cur: psycopg.Cursor[Any]) -> set[str]:
            require_table_id(cur, table_id)
            cur.execute("SELECT DISTINCT unnest(outputs) FROM jobs WHERE table_id = %s"
                        " AND status IN ('created', 'started', 'finished')"
                        " AND GREATEST(created_ms, COALESCE(started_ms, 0), COALESCE(finished_ms, 0),"
                        "              COALESCE(committed_ms, 0), COALESCE(heartbeat_ms, 0)) >= %s",
                        (table_id, active_since_ms))
            return {r[0] for r in cur.fetchall()}

        return self._db.run(f"list in-flight outputs of table {table_id}", fn,
                         isolation=IsolationLevel.READ_COMMITTED, read_only=True)
