"""A table's overview by aggregate queries: the partitions, references and records per
partition, the totals and the first files by name, in one REPEATABLE READ snapshot --
never every reference (see :mod:`statestore.overview`)."""

from __future__ import annotations

from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel

from statestore.files import FileReference, FileStatus
from statestore.overview import DEFAULT_FILE_SAMPLE, PartitionCounts, TableOverview
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.rows import PARTITION_COLUMNS, REF_COLUMNS, partition_from_row, require_table_id


def _with_references(cur: psycopg.Cursor[Any], table_id: str, files: list[Any]) -> list[FileStatus]:
    """``(filename, update_time)`` rows as FileStatus, each with its references."""
    refs: dict[str, list[FileReference]] = {name: [] for name, _ in files}
    if files:
        cur.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s"
                    " AND filename = ANY(%s) ORDER BY filename, partition_id", (table_id, list(refs)))
        for row in cur:
            ref = FileReference(*row)
            refs[ref.filename].append(ref)
    return [FileStatus(name, when, tuple(refs[name])) for name, when in files]


class PostgresOverview:
    """The file pages and overviews of :class:`~statestore.postgres.store.PostgresStateStore`
    (part of its table commits role): each read in one REPEATABLE READ snapshot."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    def file_page(self, table_id: str, *, after: Optional[str] = None, limit: int = 1000) -> list[FileStatus]:
        """See :meth:`StateStore.file_page`: reads only the page (by the files' primary key)."""
        def fn(cur: psycopg.Cursor[Any]) -> list[FileStatus]:
            require_table_id(cur, table_id)
            cur.execute("SELECT filename, update_time FROM files WHERE table_id = %s"
                        " AND (%s::text IS NULL OR filename > %s) ORDER BY filename LIMIT %s",
                        (table_id, after, after, max(0, limit)))
            return _with_references(cur, table_id, cur.fetchall())

        return self._db.run(f"list files of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)

    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
        def fn(cur: psycopg.Cursor[Any]) -> TableOverview:
            require_table_id(cur, table_id)
            cur.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s ORDER BY partition_id",
                        (table_id,))
            partitions = tuple(partition_from_row(r) for r in cur.fetchall())
            cur.execute("SELECT partition_id, count(*), COALESCE(sum(record_count), 0), bool_or(count_approximate)"
                        " FROM file_references WHERE table_id = %s GROUP BY partition_id", (table_id,))
            counts = {pid: PartitionCounts(n, int(records), bool(approx)) for pid, n, records, approx in cur}
            cur.execute("SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM file_references r"
                        " WHERE r.table_id = f.table_id AND r.filename = f.filename)) FROM files f"
                        " WHERE f.table_id = %s", (table_id,))
            files, unreferenced = cur.fetchone() or (0, 0)
            cur.execute("SELECT filename, update_time FROM files WHERE table_id = %s ORDER BY filename LIMIT %s",
                        (table_id, max(0, file_limit)))
            sample = tuple(_with_references(cur, table_id, cur.fetchall()))
            return TableOverview(partitions, counts, files, sum(c.files for c in counts.values()), unreferenced,
                                 sample)

        return self._db.run(f"overview of table {table_id}", fn, isolation=IsolationLevel.REPEATABLE_READ,
                         read_only=True)
