"""Writing the difference between two table states with a handful of set-based
statements (``unnest`` arrays; binary COPY for large inserts), so a commit costs the
rows it changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence, TypeVar

import psycopg
from psycopg.types.json import Json

from statestore.clock import now_ms
from statestore.deletes import Tombstone
from statestore.files import FileRecord, FileReference
from statestore.partitions import Partition
from statestore.postgres.rows import PARTITION_COLUMNS, REF_COLUMNS
from statestore.state import TableState

T = TypeVar("T")

#: inserts of more rows than this go through COPY
COPY_THRESHOLD = 2000

#: a commit changing more partitions and files than this logs ``all_rows`` instead of their names
MAX_LISTED = 10_000

def _changed(before: Mapping[Any, T], after: Mapping[Any, T]) -> tuple[list[Any], list[T], list[T]]:
    """(deleted keys, inserted values, updated values) from ``before`` to ``after``."""
    deleted = [k for k in before if k not in after]
    inserted: list[T] = []
    updated: list[T] = []
    for k, v in after.items():
        old = before.get(k)
        if old is None:
            inserted.append(v)
        elif old is not v and old != v:
            updated.append(v)
    return deleted, inserted, updated

@dataclass
class Diff:
    """What changed from one TableState to another: deleted keys, inserted and updated values."""

    p_del: list[str]
    p_ins: list[Partition]
    p_upd: list[Partition]
    r_del: list[tuple[str, str]]
    r_ins: list[FileReference]
    r_upd: list[FileReference]
    f_del: list[str]
    f_ins: list[FileRecord]
    f_upd: list[FileRecord]
    t_del: list[int] = field(default_factory=list)
    t_ins: list[Tombstone] = field(default_factory=list)
    delete_count: Optional[int] = None  # the new count, when it changed

    @classmethod
    def between(cls, before: TableState, after: TableState) -> Diff:
        t_del, t_ins, _ = _changed(before.tombstones, after.tombstones)  # tombstones never change in place
        return cls(*_changed(before.partitions, after.partitions), *_changed(before.references, after.references),
                   *_changed(before.files, after.files), t_del, t_ins,
                   after.delete_count if after.delete_count != before.delete_count else None)

    @property
    def tombstones_changed(self) -> bool:
        return bool(self.t_del or self.t_ins or self.delete_count is not None)

    def needs_copy(self) -> bool:
        return len(self.r_ins) > COPY_THRESHOLD or len(self.f_ins) > COPY_THRESHOLD

    def write(self, cur: psycopg.Cursor[Any], table_id: str) -> None:
        """Deletes, then inserts, then updates; a few set-based statements."""
        if self.r_del:
            cur.execute("DELETE FROM file_references r"
                        " USING unnest(%s::text[], %s::text[]) AS d(filename, partition_id)"
                        " WHERE r.table_id = %s AND r.filename = d.filename AND r.partition_id = d.partition_id",
                        ([k[0] for k in self.r_del], [k[1] for k in self.r_del], table_id))
        if self.f_del:
            cur.execute("DELETE FROM files WHERE table_id = %s AND filename = ANY(%s)", (table_id, self.f_del))
        if self.p_del:
            cur.execute("DELETE FROM partitions WHERE table_id = %s AND partition_id = ANY(%s)", (table_id, self.p_del))
        if self.t_del:
            cur.execute("DELETE FROM table_deletes WHERE table_id = %s AND number = ANY(%s)", (table_id, self.t_del))
        if self.t_ins:
            cur.executemany("INSERT INTO table_deletes (table_id, number, body) VALUES (%s, %s, %s)",
                            [(table_id, t.number, Json(t.to_dict())) for t in self.t_ins])
        if self.delete_count is not None:
            cur.execute("UPDATE tables SET delete_count = %s WHERE table_id = %s", (self.delete_count, table_id))

        if self.p_ins:
            _insert_partitions(cur, table_id, self.p_ins)
        if self.f_ins:
            if len(self.f_ins) > COPY_THRESHOLD:
                with cur.copy("COPY files (table_id, filename, update_time) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "int8"])
                    for f in self.f_ins:
                        copy.write_row((table_id, f.filename, f.update_time))
            else:
                cur.execute("INSERT INTO files (table_id, filename, update_time)"
                            " SELECT %s, * FROM unnest(%s::text[], %s::bigint[])",
                            (table_id, [f.filename for f in self.f_ins], [f.update_time for f in self.f_ins]))
        if self.r_ins:
            if len(self.r_ins) > COPY_THRESHOLD:
                with cur.copy(f"COPY file_references (table_id, {REF_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(["text", "text", "text", "int8", "bool", "bool", "text", "int8", "int8"])
                    for r in self.r_ins:
                        copy.write_row((table_id, r.filename, r.partition_id, r.record_count, r.count_approximate,
                                        r.whole_file, r.job_id, r.update_time, r.delete_horizon))
            else:
                cur.execute(f"INSERT INTO file_references (table_id, {REF_COLUMNS}) SELECT %s, * FROM unnest("
                            "%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[], %s::text[],"
                            " %s::bigint[], %s::bigint[])", (table_id, *_ref_columns(self.r_ins)))

        if self.p_upd:
            cur.execute("DELETE FROM partitions WHERE table_id = %s AND partition_id = ANY(%s)",
                        (table_id, [p.id for p in self.p_upd]))
            _insert_partitions(cur, table_id, self.p_upd)
        if self.f_upd:
            cur.execute("UPDATE files f SET update_time = u.update_time"
                        " FROM unnest(%s::text[], %s::bigint[]) AS u(filename, update_time)"
                        " WHERE f.table_id = %s AND f.filename = u.filename",
                        ([f.filename for f in self.f_upd], [f.update_time for f in self.f_upd], table_id))
        if self.r_upd:
            cur.execute("UPDATE file_references r SET record_count = u.record_count,"
                        " count_approximate = u.count_approximate, whole_file = u.whole_file, job_id = u.job_id,"
                        " update_time = u.update_time, delete_horizon = u.delete_horizon"
                        " FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::boolean[], %s::boolean[],"
                        " %s::text[], %s::bigint[], %s::bigint[]) AS u(filename, partition_id, record_count,"
                        " count_approximate, whole_file, job_id, update_time, delete_horizon)"
                        " WHERE r.table_id = %s AND r.filename = u.filename AND r.partition_id = u.partition_id",
                        (*_ref_columns(self.r_upd), table_id))

def write_diff(cur: psycopg.Cursor[Any], table_id: str, before: TableState, after: TableState) -> None:
    Diff.between(before, after).write(cur, table_id)

def _ref_columns(refs: Sequence[FileReference]) -> tuple[list[Any], ...]:
    return ([r.filename for r in refs], [r.partition_id for r in refs], [r.record_count for r in refs],
            [r.count_approximate for r in refs], [r.whole_file for r in refs], [r.job_id for r in refs],
            [r.update_time for r in refs], [r.delete_horizon for r in refs])

def _insert_partitions(cur: psycopg.Cursor[Any], table_id: str, parts: Sequence[Partition]) -> None:
    cur.executemany(f"INSERT INTO partitions (table_id, {PARTITION_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    [(table_id, p.id, p.parent_id, list(p.child_ids), p.is_leaf, p.dimension, Json(p.region.to_dict()))
                     for p in parts])


def log_change(cur: psycopg.Cursor[Any], table_id: str, diff: Diff) -> None:
    """Record in ``state_changes`` (:mod:`statestore.postgres.changes`), in the commit's
    transaction, which partitions and files ``diff`` changed (nothing when it changed no
    partition and no reference)."""
    pids = {*diff.p_del, *(p.id for p in diff.p_ins), *(p.id for p in diff.p_upd)}
    names = {*(k[0] for k in diff.r_del), *(r.filename for r in diff.r_ins), *(r.filename for r in diff.r_upd)}
    if not pids and not names and not diff.tombstones_changed:
        return
    if len(pids) + len(names) > MAX_LISTED:
        cur.execute("INSERT INTO state_changes (table_id, xid, applied_ms, all_rows)"
                    " VALUES (%s, pg_current_xact_id(), %s, true)", (table_id, now_ms()))
    else:
        cur.execute("INSERT INTO state_changes (table_id, xid, applied_ms, partition_ids, filenames)"
                    " VALUES (%s, pg_current_xact_id(), %s, %s, %s)", (table_id, now_ms(), list(pids), list(names)))
