"""History and as-of reads (:mod:`statestore.history`) in PostgreSQL: the
``table_history`` log (``include/sql/010_table_history.sql``).

* A commit that changes anything inserts one row in its own database transaction
  (:func:`log_history`): its number (``pg_current_xact_id()``, the number
  :meth:`~statestore.postgres.changes.PostgresChanges.transaction_number` gives), its
  summary, and its undo record (:func:`undo_of`): the before-images of the partitions,
  references, files and tombstones it deleted or updated, and the keys of those it
  inserted.
* :meth:`PostgresHistory.state_as_of` reads, in one REPEATABLE READ transaction, the whole
  current state and the undo records numbered above the one asked for, and undoes them
  newest first (:func:`undo`): the cost is the table's size plus the changes since.
* :func:`prune_history` forgets rows from the old end once no retained state needs
  them, never leaving a gap: every row numbered above a kept row is kept.
"""

from __future__ import annotations

import json
import zlib
from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel
from psycopg.types.json import Json

from statestore.deletes import TOMBSTONE_GOES, KeyRecord, Tombstone
from statestore.errors import TableNotFoundError
from statestore.files import FileRecord, FileReference
from statestore.history import HistoryError, retention_ms, summarise
from statestore.partitions import Partition
from statestore.postgres.connections import PostgresConnection
from statestore.postgres.diff import Diff
from statestore.postgres.rows import TOMBSTONES, fill_tombstones, gc_paused, load_all, require_table_id, table_info
from statestore.properties import HISTORY_RETENTION_MINUTES
from statestore.state import TableState
from statestore.summaries import TransactionSummary
from statestore.transactions import Transaction


def _ref_row(r: FileReference) -> list[Any]:
    return [r.filename, r.partition_id, r.record_count, r.count_approximate, r.whole_file, r.job_id, r.update_time,
            r.delete_horizon]


def undo_of(diff: Diff, before: TableState) -> dict[str, Any]:
    """What undoes ``diff`` (made from ``before``): before-images of what it deleted or
    updated, keys of what it inserted (a file it added stands for all its references)."""
    p_changed = [*diff.p_del, *(p.id for p in diff.p_upd)]
    r_changed = [*diff.r_del, *((r.filename, r.partition_id) for r in diff.r_upd)]
    f_changed = [*diff.f_del, *(f.filename for f in diff.f_upd)]
    new_files = {f.filename for f in diff.f_ins}
    return {
        "p": [before.partitions[p].to_dict() for p in p_changed], "pi": [p.id for p in diff.p_ins],
        "r": [_ref_row(before.references[k]) for k in r_changed],
        # the references of a file the commit added go with it ("fi"): only others are listed
        "ri": [[r.filename, r.partition_id] for r in diff.r_ins if r.filename not in new_files],
        "f": [[f, before.files[f].update_time] for f in f_changed], "fi": [f.filename for f in diff.f_ins],
        "t": [before.tombstones[n].to_dict() for n in diff.t_del], "ti": [t.number for t in diff.t_ins],
        "dc": before.delete_count if diff.delete_count is not None else None,
    }


def undo(state: TableState, record: dict[str, Any]) -> None:
    """Undo one transaction's changes in ``state`` (see :func:`undo_of`)."""
    for pid in record["pi"]:
        state.partitions.pop(pid, None)
    for d in record["p"]:
        p = Partition.from_dict(d)
        state.partitions[p.id] = p
    for name, pid in record["ri"]:
        if (name, pid) in state.references:
            state.remove_reference(name, pid)
    for row in record["r"]:
        state.put_reference(FileReference(*row))
    for name in record["fi"]:
        state.files.pop(name, None)
        for pid in list(state.refs_by_file.get(name, ())):
            state.remove_reference(name, pid)
    for name, update_time in record["f"]:
        state.files[name] = FileRecord(name, update_time)
    for n in record["ti"]:
        state.tombstones.pop(n, None)
    for d in record["t"]:
        t = Tombstone.from_dict(d)
        state.tombstones[t.number] = t
    if record["dc"] is not None:
        state.delete_count = record["dc"]


def log_history(cur: psycopg.Cursor[Any], table_id: str, txn: Transaction, diff: Diff, before: TableState,
                after: TableState, job_id: Optional[str], applied_ms: int) -> None:
    """Insert the commit's history row (nothing when ``diff`` changed nothing)."""
    if not (diff.p_del or diff.p_ins or diff.p_upd or diff.r_del or diff.r_ins or diff.r_upd or diff.f_del
            or diff.f_ins or diff.f_upd or diff.tombstones_changed):
        return
    summary = summarise(0, applied_ms, txn, before, after, job_id).to_dict()
    del summary["number"], summary["time_ms"]
    body = zlib.compress(json.dumps(undo_of(diff, before), separators=(",", ":")).encode(), 1)
    cur.execute("INSERT INTO table_history (table_id, number, applied_ms, summary, undo)"
                " VALUES (%s, pg_current_xact_id()::text::bigint, %s, %s, %s)",
                (table_id, applied_ms, Json(summary), body))


#: the undo record of a row no retained state needs undone (see :func:`prune_history`)
_NO_UNDO = zlib.compress(json.dumps({"p": [], "pi": [], "r": [], "ri": [], "f": [], "fi": [], "t": [], "ti": [],
                                     "dc": None}, separators=(",", ":")).encode(), 1)


def prune_history(cur: psycopg.Cursor[Any], table_id: str, before_ms: int) -> int:
    """Forget the table's history rows no retained state needs; returns how many. Kept:
    the newest row applied before ``before_ms`` (the state current when the retention
    began: its successor is inside it) and every row numbered above it -- and, should
    committers' clocks disagree, every row numbered above the first applied at or after
    ``before_ms``. The kept row applied before ``before_ms`` loses its undo record:
    only the states before it, none retained, would undo it, and it may hold a dropped
    tombstone's keys (docs/adr/0015-erasure-of-delete-keys.md)."""
    cur.execute("DELETE FROM table_history WHERE table_id = %(t)s AND number < LEAST("
                " COALESCE((SELECT max(number) FROM table_history WHERE table_id = %(t)s AND applied_ms < %(ms)s), 0),"
                " COALESCE((SELECT min(number) FROM table_history WHERE table_id = %(t)s AND applied_ms >= %(ms)s),"
                " 9223372036854775807))", {"t": table_id, "ms": before_ms})
    gone = cur.rowcount
    cur.execute("UPDATE table_history SET undo = %(u)s WHERE table_id = %(t)s AND applied_ms < %(ms)s AND number = ("
                " SELECT min(number) FROM table_history WHERE table_id = %(t)s) AND undo <> %(u)s",
                {"t": table_id, "ms": before_ms, "u": _NO_UNDO})
    return gone


def key_records(cur: psycopg.Cursor[Any], table_id: str, retention: int) -> list[KeyRecord]:
    """The table's history rows that hold a delete's keys (see
    :meth:`PostgresHistory.delete_key_records`)."""
    out = []
    rows = cur.execute("SELECT number, applied_ms, summary, undo FROM table_history WHERE table_id = %s"
                       " ORDER BY number", (table_id,)).fetchall()
    for i, (number, applied_ms, summary, body) in enumerate(rows):
        dropped = [Tombstone.from_dict(d) for d in json.loads(zlib.decompress(body)).get("t", ())]
        if dropped:
            out.append(KeyRecord(f"history row of transaction {number} (the undo of a drop: tombstones "
                                 f"{', '.join(str(t.number) for t in dropped)})",
                                 tuple(r for t in dropped for r in t.regions), None, _UNDO_GOES,
                                 int(applied_ms) + retention))
        detail = summary.get("detail") or ""
        if summary.get("kind") == "delete_records" and " in [" in detail:  # written by a release before 0015
            nxt = int(rows[i + 1][1]) + retention if i + 1 < len(rows) else None
            out.append(KeyRecord(f"history row of transaction {number} (detail {detail[:60]!r})", None, None,
                                 _ROW_GOES, nxt))
    return out


_UNDO_GOES = "with the undo record, at the first GC once the row is older than sleeper.table.history.retention.minutes"
_ROW_GOES = f"with the row, at the first GC once a later transaction is older than {HISTORY_RETENTION_MINUTES}"


def _summary(row: Any) -> TransactionSummary:
    return TransactionSummary.from_dict({**row[2], "number": int(row[0]), "time_ms": int(row[1])})


class PostgresHistory:
    """The history of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    def _read(self, what: str, table_id: str, query: str, params: tuple[Any, ...]) -> list[Any]:
        def fn(cur: psycopg.Cursor[Any]) -> list[Any]:
            rows = cur.execute(query, params).fetchall()
            if not rows:
                require_table_id(cur, table_id)
            return rows

        return self._db.run(f"{what} of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)

    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]:
        rows = self._read("read the history", table_id,
                          "SELECT number, applied_ms, summary FROM table_history WHERE table_id = %s"
                          " AND number <= %s ORDER BY number DESC LIMIT %s",
                          (table_id, 2**63 - 1 if upto is None else upto, max(0, limit)))
        return [_summary(r) for r in rows]

    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]:
        rows = self._read("read the history", table_id,
                          "SELECT number, applied_ms, summary FROM table_history WHERE table_id = %s"
                          " AND number > %s ORDER BY number LIMIT 1", (table_id, number))
        return _summary(rows[0]) if rows else None

    def number_at(self, table_id: str, time_ms: int) -> Optional[int]:
        rows = self._read("find a transaction by time", table_id,
                          "SELECT max(number) FROM table_history WHERE table_id = %s AND applied_ms <= %s",
                          (table_id, time_ms))
        return None if not rows or rows[0][0] is None else int(rows[0][0])

    def state_as_of(self, table_id: str, number: int) -> TableState:
        def fn(cur: psycopg.Cursor[Any]) -> TableState:
            require_table_id(cur, table_id)
            if cur.execute("SELECT 1 FROM table_history WHERE table_id = %s AND number = %s",
                           (table_id, number)).fetchone() is None:
                raise HistoryError(f"table {table_id} has no transaction {number} in its history")
            with gc_paused():
                state = load_all(cur, table_id)
                cur.execute("SELECT undo FROM table_history WHERE table_id = %s AND number > %s ORDER BY number DESC",
                            (table_id, number))
                for (body,) in cur:
                    undo(state, json.loads(zlib.decompress(body)))
            return state

        return self._db.run(f"read table {table_id} as of transaction {number}", fn,
                         isolation=IsolationLevel.REPEATABLE_READ, read_only=True)

    def prune_history(self, table_id: str, now: int) -> int:
        """See :meth:`StateStore.prune_history` and :func:`prune_history`."""
        def fn(cur: psycopg.Cursor[Any]) -> int:
            return prune_history(cur, table_id, now - retention_ms(table_info(_require_table_row(cur, table_id))))

        return self._db.run(f"prune the history of table {table_id}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        """See :meth:`StateStore.delete_key_records`: the live tombstones (``table_deletes``)
        and the ``table_history`` rows holding a delete's keys (the undo record of a drop,
        or a detail written by a release before docs/adr/0015), read in one transaction."""
        def fn(cur: psycopg.Cursor[Any]) -> list[KeyRecord]:
            row = _require_table_row(cur, table_id)
            state = fill_tombstones(TableState(), cur.execute(TOMBSTONES, (table_id,)).fetchone())
            live = [KeyRecord(f"tombstone {t.number}", t.regions, t.where, TOMBSTONE_GOES)
                    for t in sorted(state.tombstones.values(), key=lambda t: t.number)]
            return live + key_records(cur, table_id, retention_ms(table_info(row)))

        return self._db.run(f"find the records holding delete keys of table {table_id}", fn,
                            isolation=IsolationLevel.REPEATABLE_READ, read_only=True)


def _require_table_row(cur: psycopg.Cursor[Any], table_id: str) -> Any:
    """The catalog row of the table (id, name, schema, properties). Raises TableNotFoundError."""
    row = cur.execute("SELECT table_id, name, schema, properties FROM tables WHERE table_id = %s",
                      (table_id,)).fetchone()
    if row is None:
        raise TableNotFoundError(f"no table with id {table_id}")
    return row
