"""Job status records: an upsert that never overwrites a committed record with anything
but a committed one, so a losing attempt cannot undo the winner's record."""

from __future__ import annotations

from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel, sql

from statestore.jobs import JobRecord
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import _JOB_COLUMNS, _job_from_row, _require_table_id


class JobsMixin(PostgresConnection):
    """The job status part of :class:`~statestore.postgres.store.PostgresStateStore`."""

    # ----- job status -----------------------------------------------------------------
    def put_job(self, record: JobRecord) -> None:
        d = record.to_dict()
        cols = list(d)
        stmt = sql.SQL("INSERT INTO jobs ({}) VALUES ({}) ON CONFLICT (table_id, job_id) DO UPDATE SET {}"
                       " WHERE jobs.status <> 'committed' OR EXCLUDED.status = 'committed'").format(
            sql.SQL(", ").join(map(sql.Identifier, cols)),
            sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c))
                               for c in cols if c not in ("table_id", "job_id")))

        def fn(cur: psycopg.Cursor[Any]) -> None:
            _require_table_id(cur, record.table_id)
            cur.execute(stmt, list(d.values()))

        self._run(f"save job {record.job_id}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[JobRecord]:
            cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE table_id = %s AND job_id = %s", (table_id, job_id))
            row = cur.fetchone()
            return None if row is None else _job_from_row(row)

        return self._run(f"read job {job_id}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None, limit: int = 1000) -> list[JobRecord]:
        def fn(cur: psycopg.Cursor[Any]) -> list[JobRecord]:
            cur.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE table_id = %s AND (%s::text IS NULL OR kind = %s)"
                        " ORDER BY created_ms DESC, job_id DESC LIMIT %s", (table_id, kind, kind, max(0, limit)))
            return [_job_from_row(r) for r in cur.fetchall()]

        return self._run(f"list jobs of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED,
                         read_only=True)
