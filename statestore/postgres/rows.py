"""Reading rows: column lists, row -> domain object, and the queries that load a whole
table's state or the fragment a transaction touches (all sent without waiting, so a
pipeline can carry them)."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from itertools import starmap
from typing import Any, Iterator, Optional, Sequence

import psycopg

from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.errors import TableNotFoundError
from statestore.files import FileRecord, FileReference
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.partitions import Partition
from statestore.region import Region
from statestore.schema import Schema
from statestore.state import TableState
from statestore.transactions import Touches

REF_COLUMNS = ("filename, partition_id, record_count, count_approximate, whole_file, job_id, update_time,"
                " delete_horizon")

#: one row: the table's delete count and its live tombstones as a JSON array
TOMBSTONES = ("SELECT t.delete_count, (SELECT COALESCE(json_agg(d.body ORDER BY d.number), '[]'::json)"
               " FROM table_deletes d WHERE d.table_id = t.table_id) FROM tables t WHERE t.table_id = %s")

PARTITION_COLUMNS = "partition_id, parent_id, child_ids, is_leaf, dimension, region"

JOB_COLUMNS = ", ".join(JobRecord.__dataclass_fields__)

INGEST_REQUEST_COLUMNS = ", ".join(IngestRequest.__dataclass_fields__)

def partition_from_row(row: Sequence[Any]) -> Partition:
    pid, parent, children, leaf, dimension, region = row
    return Partition(pid, Region.from_dict(region), parent, tuple(children), leaf, dimension)

def table_info(row: Sequence[Any]) -> TableInfo:
    table_id, name, schema, properties = row
    return TableInfo(table_id, name, Schema.from_dict(schema), dict(properties))

def job_from_row(row: Sequence[Any]) -> JobRecord:
    return JobRecord(*row)  # outputs (a list) becomes a tuple in JobRecord.__post_init__

def require_table(cur: psycopg.Cursor[Any], name: str) -> Sequence[Any]:
    if "\x00" in name:  # PostgreSQL text cannot hold NUL, so no table has such a name
        raise TableNotFoundError(f"table {name!r} does not exist")
    row = cur.execute("SELECT table_id, name, schema, properties FROM tables WHERE name = %s", (name,)).fetchone()
    if row is None:
        raise TableNotFoundError(f"table {name!r} does not exist")
    return row

def require_table_id(cur: psycopg.Cursor[Any], table_id: str) -> None:
    if cur.execute("SELECT 1 FROM tables WHERE table_id = %s", (table_id,)).fetchone() is None:
        raise TableNotFoundError(f"no table with id {table_id}")

def fill_state(state: TableState, partitions: Sequence[Sequence[Any]], files: Sequence[Sequence[Any]],
          refs: Sequence[Sequence[Any]]) -> TableState:
    for row in partitions:
        p = partition_from_row(row)
        state.partitions[p.id] = p
    for name, when in files:
        state.files[name] = FileRecord(name, when)
    state.put_references(starmap(FileReference, refs))
    return state

@contextmanager
def gc_paused(pause: bool = True) -> Iterator[None]:
    """Pause the cyclic garbage collector while building many objects at once."""
    if not pause or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

def read_fragment(conn: psycopg.Connection[Any], table_id: str,
                   touches: Touches) -> tuple[Optional[psycopg.Cursor[Any]], Optional[psycopg.Cursor[Any]]]:
    """Send the queries for the rows ``touches`` names: partitions by id; each named
    file's record joined with all its references (one row per reference, or one row
    with NULL reference columns). Names go as binary arrays (no quoting to check)."""
    partitions = files = None
    if touches.partition_ids:
        partitions = conn.execute(
            f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s AND partition_id = ANY(%b)",
            (table_id, list(touches.partition_ids)))
    if touches.filenames:
        files = conn.execute(
            "SELECT f.filename, f.update_time, r.partition_id, r.record_count, r.count_approximate, r.whole_file,"
            " r.job_id, r.update_time, r.delete_horizon"
            " FROM files f LEFT JOIN file_references r ON r.table_id = f.table_id AND r.filename = f.filename"
            " WHERE f.table_id = %s AND f.filename = ANY(%b)", (table_id, list(touches.filenames)))
    return partitions, files

def fill_tombstones(state: TableState, row: Optional[Sequence[Any]]) -> TableState:
    """Put the row of :data:`TOMBSTONES` into ``state``."""
    if row is not None:
        state.delete_count = int(row[0])
        state.tombstones = {t.number: t for t in (Tombstone.from_dict(d) for d in row[1])}
    return state

def fill_fragment(partitions: Sequence[Sequence[Any]], files_with_refs: Sequence[Sequence[Any]]) -> TableState:
    state = fill_state(TableState(), partitions, (), ())
    files = state.files
    refs = []
    for name, file_time, pid, count, approximate, whole, job, ref_time, horizon in files_with_refs:
        if name not in files:
            files[name] = FileRecord(name, file_time)
        if pid is not None:
            refs.append(FileReference(name, pid, count, approximate, whole, job, ref_time, horizon))
    state.put_references(refs)
    return state

def read_all(conn: psycopg.Connection[Any], table_id: str) -> tuple[psycopg.Cursor[Any], ...]:
    return (conn.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,)),
            conn.execute("SELECT filename, update_time FROM files WHERE table_id = %s", (table_id,)),
            conn.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,)))

def load_all(cur: psycopg.Cursor[Any], table_id: str) -> TableState:
    cur.execute(f"SELECT {PARTITION_COLUMNS} FROM partitions WHERE table_id = %s", (table_id,))
    partitions = cur.fetchall()
    cur.execute("SELECT filename, update_time FROM files WHERE table_id = %s", (table_id,))
    files = cur.fetchall()
    cur.execute(f"SELECT {REF_COLUMNS} FROM file_references WHERE table_id = %s", (table_id,))
    refs = cur.fetchall()
    cur.execute(TOMBSTONES, (table_id,))
    return fill_tombstones(fill_state(TableState(), partitions, files, refs), cur.fetchone())
