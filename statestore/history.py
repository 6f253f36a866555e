"""A table's history and time travel (issue 22): what each transaction did, and the
state as of an earlier transaction.

Every backend keeps, for every commit that changed a table's partitions, references,
files or tombstones, a :class:`TransactionSummary` (number, time, kind, the files and
records it added and removed, the job that made it), and can rebuild the whole
:class:`~statestore.state.TableState` as it was right after any transaction still in
its history (:meth:`StateStore.state_as_of <statestore.store.StateStore.state_as_of>`):

* in memory, by replaying the table's transactions from its first state;
* on PostgreSQL, by undoing, newest first, the transactions after the one asked for:
  each commit logs the before-images of the rows it changed in ``table_history``
  (``include/sql/010_table_history.sql``; docs/adr/0007-time-travel.md says why);
* on DynamoDB, by loading the newest snapshot at or before it and replaying the log up
  to it.

**Numbers.** A transaction number only grows (:meth:`StateStore.transaction_number`):
1, 2, 3, ... on DynamoDB and in memory; PostgreSQL transaction ids on PostgreSQL
(increasing, not consecutive).

**Retention.** ``sleeper.table.history.retention.minutes`` (:data:`HISTORY_RETENTION_MINUTES`)
sets how far back a table can be read. A state is *retained* while it was current at
some moment within the retention: it is the newest, or the transaction after it
committed no earlier than ``now - retention``. Garbage collection keeps every file a
retained state references (a file becomes unreferenced when the state after it is
made, so keeping files unreferenced for less than the retention keeps them all), and
the backends keep the history they need to rebuild every retained state.
:func:`resolve_as_of` refuses, in one line, a time before the retention, a number the
table never had, and a state no longer retained.
"""

from __future__ import annotations

import datetime
import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional, Union

from statestore.deletes import Tombstone
from statestore.errors import SleeperError
from statestore.properties import HISTORY_RETENTION_MINUTES
from statestore.state import TableState
from statestore.summaries import TransactionSummary

if TYPE_CHECKING:
    from statestore.roles import History
    from statestore.transactions import Transaction


#: ``as_of`` as callers give it: a transaction number, or a time (aware datetime, or ms since the epoch as a float)
AsOf = Union[int, datetime.datetime]


class HistoryError(SleeperError):
    """An as-of read was refused: the transaction does not exist, or the time or the
    state is older than the table's history retention. Nothing was read."""


def fragment_of(state: TableState, txn: Transaction) -> TableState:
    """The rows of ``state`` that ``txn`` reads or writes (its touches: partitions,
    files with every reference, tombstones): a copy to apply ``txn`` to beside
    ``state``, so a summary costs the size of the change, not of the table."""
    touches = txn.touches()
    if touches.whole_table:
        return state.copy()
    out = TableState()
    for pid in touches.partition_ids:
        if pid in state.partitions:
            out.partitions[pid] = state.partitions[pid]
    for name in touches.filenames:
        if name in state.files:
            out.files[name] = state.files[name]
        for pid in state.refs_by_file.get(name, ()):
            out.put_reference(state.references[(name, pid)])
    out.tombstones, out.delete_count = dict(state.tombstones), state.delete_count
    return out


def summarise(number: int, time_ms: int, txn: Transaction, before: TableState, after: TableState,
              job_id: Optional[str] = None) -> TransactionSummary:
    """The summary of ``txn`` from the state (or fragment) it applied to, ``before``,
    and the one it made, ``after``. ``job_id``: the committing job's, when known;
    else the compaction job named by the transaction, if any."""
    had, has = _records_by_file(before), _records_by_file(after)
    added = removed = rec_added = rec_removed = 0
    for name, records in has.items():
        if name not in had:
            added += 1
            rec_added += records
    for name, records in had.items():
        if name not in has:
            removed += 1
            rec_removed += records
    return TransactionSummary(number, time_ms, txn.TYPE, added, removed, rec_added, rec_removed,
                              job_id or _job_of(txn), _detail(txn, before, after))


def delete_digest(t: Tombstone) -> str:
    """What a delete's history detail says of it: how many regions on which fields, and
    a digest of its regions and predicate -- never the keys, which the history would
    otherwise keep for its whole retention after the delete is purged
    (docs/adr/0015-erasure-of-delete-keys.md). The same delete always gives the same
    digest, so an auditor holding the request can match it."""
    fields = sorted({r.field for region in t.regions for r in region.ranges})
    canonical = json.dumps({"regions": [r.to_dict() for r in t.regions], "where": t.where}, sort_keys=True,
                           separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode()).hexdigest()[:16]
    n = len(t.regions)
    return (f"{n} region{'' if n == 1 else 's'} of {', '.join(fields)}{' with a predicate' if t.where else ''}, "
            f"sha256 {digest}")


def _records_by_file(state: TableState) -> dict[str, int]:
    out: dict[str, int] = {}
    for (name, _), ref in state.references.items():
        out[name] = out.get(name, 0) + ref.record_count
    return out


def _job_of(txn: Transaction) -> Optional[str]:
    job = getattr(txn, "job_id", None)  # a compaction commit names its job
    if isinstance(job, str):
        return job
    jobs = sorted({a.job_id for a in getattr(txn, "assignments", ())})  # job assignment: the jobs created
    return None if not jobs else ",".join(jobs) if len(jobs) <= 3 else f"{len(jobs)} jobs"


def _detail(txn: Transaction, before: TableState, after: TableState) -> Optional[str]:
    kind = txn.TYPE
    if kind == "delete_records":
        n = after.delete_count
        t = after.tombstones.get(n)
        if t is None:
            return f"delete {n}"
        return f"delete {n}: {delete_digest(t)}"
    if kind == "delete_files":
        gone = len(set(before.files) - set(after.files))
        return f"forgot {gone} unreferenced file{'' if gone == 1 else 's'}"
    if kind == "drop_tombstones":
        dropped = sorted(set(before.tombstones) - set(after.tombstones))
        return "dropped spent deletes " + ", ".join(str(n) for n in dropped)
    if kind == "split_partition":
        split = sorted(p for p in before.partitions if p in after.partitions and before.partitions[p].is_leaf
                       and not after.partitions[p].is_leaf)
        return f"split partition {', '.join(split)}" if split else None
    return None


# ----- as-of reads ----------------------------------------------------------------------
@dataclass(frozen=True)
class AsOfState:
    """The state of a table as of transaction ``number`` (committed at ``time_ms``)."""

    number: int
    time_ms: int
    state: TableState


def parse_as_of(text: str) -> AsOf:
    """``--as-of`` as typed: digits are a transaction number; anything else an ISO 8601
    time (``2026-11-24T09:30:00Z``; no zone: UTC). Raises HistoryError in one line."""
    text = text.strip()
    if text.isascii() and text.isdigit():
        if int(text) >= 2**63:  # no store numbers a transaction beyond a signed 64-bit integer
            raise HistoryError(f"--as-of {text!r} is not a transaction number (too large)")
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise HistoryError(f"--as-of {text!r} is neither a transaction number nor an ISO 8601 time "
                           "(e.g. 2026-11-24T09:30:00Z)") from None
    return when if when.tzinfo else when.replace(tzinfo=datetime.UTC)


def _iso(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="seconds")


def retention_ms(properties: Any) -> int:
    """The table's history retention in ms, from its catalog entry (a ``TableInfo``)."""
    return int(properties.get_int(HISTORY_RETENTION_MINUTES)) * 60_000


def resolve_as_of(store: History, table_id: str, table_name: str, as_of: AsOf, *, retention: int,
                  now_ms: int) -> AsOfState:
    """The table's state as of ``as_of`` (a transaction number, or a time: the state
    after the last transaction committed at or before it), refusing with one line of
    :class:`HistoryError` a time after ``now_ms`` (what a table holds then is not known
    yet: later commits may still come before it), a time before the retention (``now_ms - retention``), a
    number the table never had (or whose history is gone), and a state no longer
    retained (see the module docstring)."""
    number, time_ms = resolve_number(store, table_id, table_name, as_of, retention=retention, now_ms=now_ms)
    return AsOfState(number, time_ms, store.state_as_of(table_id, number))


def resolve_number(store: History, table_id: str, table_name: str, as_of: AsOf, *, retention: int,
                   now_ms: int) -> tuple[int, int]:
    """The number and time of the transaction :func:`resolve_as_of` reads the state
    after, with its refusals; reads a few history entries, not the state."""
    start = now_ms - retention
    if isinstance(as_of, datetime.datetime):
        when = int(as_of.timestamp() * 1000)
        if when > now_ms:
            raise HistoryError(f"table {table_name!r}: --as-of {_iso(when)} is in the future (now {_iso(now_ms)}); "
                               "its state then is not known yet: leave out --as-of to read the current state")
        if when < start:
            raise HistoryError(f"table {table_name!r} keeps {retention // 60_000} minutes of history: "
                               f"{_iso(when)} is before {_iso(start)}")
        number = store.number_at(table_id, when)
        if number is None:
            raise HistoryError(f"table {table_name!r} had no transaction at or before {_iso(when)}")
    else:
        number = int(as_of)
    found = store.history(table_id, limit=1, upto=number)
    if not found or found[0].number != number:
        newest = store.history(table_id, limit=1)
        has = f"its newest is {newest[0].number}" if newest else "it has none"
        raise HistoryError(f"table {table_name!r} has no transaction {number} in its history ({has}; "
                           f"see sleeper history {table_name})")
    successor = store.history_after(table_id, number)
    if successor is not None and successor.time_ms < start:
        raise HistoryError(f"transaction {number} of table {table_name!r} was replaced at {_iso(successor.time_ms)}, "
                           f"before its {retention // 60_000}-minute history retention ({_iso(start)})")
    return number, found[0].time_ms


def replay(base: TableState, transactions: Iterable[Transaction]) -> TableState:
    """``base`` (changed in place) with ``transactions`` applied in order."""
    for t in transactions:
        t.apply(base)
    return base
