"""History and as-of reads (:mod:`statestore.history`) on DynamoDB: the transaction log
and its snapshots.

* Each log item carries its transaction's summary (``summary``, JSON without number
  and time, which the item's ``n`` and ``time_ms`` give), computed by the committer
  from the rows the transaction touched (:func:`summary_attribute`). So
  :meth:`DynamoHistory.history` is one query of the log's newest items, bodies not read.
  A summary counts toward its item's 400 KB (:mod:`statestore.dynamodb.sizes`), so it
  takes at most :data:`SUMMARY_LIMIT` bytes: a longer detail (a delete of thousands of
  keys) keeps its first ranges and says how many more there are ("... and 4,980
  more"); the transaction's body holds them all.
* :meth:`DynamoHistory.state_as_of` loads the newest snapshot at or before the number
  asked for and applies the logged transactions up to it (bodies stored in the object
  store read from there): at most ``snapshot_every`` transactions past a snapshot.
* Expiry (:meth:`~statestore.dynamodb.store.DynamoDBStateStore.expire`) keeps the
  newest snapshot made before the table's history retention began (its *base*) and
  every log item from its number on, so every retained state can be rebuilt.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from statestore.dynamodb import snapshots
from statestore.dynamodb.connection import get_n, get_s, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.log import decode
from statestore.history import HistoryError, fragment_of, summarise
from statestore.state import TableState
from statestore.summaries import TransactionSummary
from statestore.transactions import DeleteRecords, Transaction

if TYPE_CHECKING:
    from statestore.deletes import KeyRecord

_PROJECTION = "n, time_ms, #k, summary"
_NAMES = {"#k": "type"}
#: the most bytes of a log item's summary (items hold 400 KB: the body takes up to 350,000)
SUMMARY_LIMIT = 8_000


def _summary_dict(txn: Transaction, state: TableState, job_id: Optional[str]) -> dict[str, Any]:
    before = fragment_of(state, txn)
    after = before.copy()
    txn.apply(after)
    summary = summarise(0, 0, txn, before, after, job_id).to_dict()
    del summary["number"], summary["time_ms"]
    return summary


def _encoded(summary: dict[str, Any]) -> str:
    return json.dumps(summary, separators=(",", ":"))


def _shorter_detail(txn: Transaction, state: TableState, summary: dict[str, Any]) -> Optional[str]:
    """The detail of a delete of many regions cut to its first regions that fit the
    limit, then "and N more" (the detail of the same delete of only those regions, so
    the text reads as the full one does)."""
    if not isinstance(txn, DeleteRecords) or len(txn.regions) < 2:
        return None
    regions = txn.regions

    def fits(k: int) -> Optional[str]:
        head = _summary_dict(dataclasses.replace(txn, regions=regions[:k]), state, None).get("detail") or ""
        detail = f"{head} ... and {len(regions) - k} more"
        return detail if len(_encoded({**summary, "detail": detail}).encode()) <= SUMMARY_LIMIT else None

    lo, hi, best = 1, len(regions) - 1, None
    while lo <= hi:  # the most regions that fit (each costs a few dozen bytes)
        mid = (lo + hi) // 2
        got = fits(mid)
        if got is None:
            hi = mid - 1
        else:
            lo, best = mid + 1, got
    return best


def summary_attribute(txn: Transaction, state: TableState, job_id: Optional[str]) -> dict[str, Any]:
    """The ``summary`` attribute of the log item of ``txn``, validated against ``state``
    (not changed): the summary of applying it to a copy of the rows it touches, at most
    :data:`SUMMARY_LIMIT` bytes (see the module docstring)."""
    summary = _summary_dict(txn, state, job_id)
    text = _encoded(summary)
    if len(text.encode()) <= SUMMARY_LIMIT:
        return s(text)
    for key in ("job_id", "detail"):  # each at most a quarter of the limit as JSON, the rest cut
        value = summary.get(key)
        if isinstance(value, str) and len(json.dumps(value)) > SUMMARY_LIMIT // 4:
            while len(json.dumps(value)) > SUMMARY_LIMIT // 4:
                value = value[:len(value) * 3 // 4]
            summary[key] = value + " ..."
    detail = _shorter_detail(txn, state, summary)
    if detail is not None:
        summary["detail"] = detail
    return s(_encoded(summary))


def _summary(item: dict[str, Any]) -> TransactionSummary:
    number, time_ms = get_n(item, "n") or 0, get_n(item, "time_ms") or 0
    raw = get_s(item, "summary")
    if raw is None:  # logged before summaries were
        return TransactionSummary(number, time_ms, get_s(item, "type") or "")
    return TransactionSummary.from_dict({**json.loads(raw), "number": number, "time_ms": time_ms})


class Expiry(Protocol):
    """What :meth:`DynamoHistory.prune_history` runs
    (:class:`~statestore.dynamodb.retention.DynamoRetention`)."""

    def expire(self, table_id: str, *, now_ms: Optional[int] = None) -> tuple[int, int]: ...


class DynamoHistory:
    """The :class:`~statestore.roles.History` role of
    :class:`~statestore.dynamodb.store.DynamoDBStateStore` (see the module docstring):
    :meth:`prune_history` is the retention's expiry as at a time, and the records
    holding a delete's keys are found by ``key_records`` (the store passes
    :meth:`statestore.dynamodb.erasure.DynamoErasure.delete_key_records`, which reads
    what the blob sweep reads)."""

    def __init__(self, context: DynamoContext, retention: Expiry,
                 key_records: Callable[[str, int], list[KeyRecord]]) -> None:
        self.context = context
        self.retention = retention
        self._key_records = key_records

    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]:
        self.context.require_table_id(table_id)
        if limit <= 0:
            return []
        cond, values = "table_id = :t", {":t": s(table_id)}
        if upto is not None:
            cond, values = "table_id = :t AND n <= :n", {":t": s(table_id), ":n": n(upto)}
        out = []
        for it in self.context.dynamo.query(f"read the history of table {table_id}", "log", cond, values, forward=False,
                                     limit=limit, names=_NAMES, projection=_PROJECTION):
            out.append(_summary(it))
            if len(out) >= limit:
                break
        return out

    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]:
        for it in self.context.dynamo.query(f"read the history of table {table_id}", "log", "table_id = :t AND n > :n",
                                     {":t": s(table_id), ":n": n(number)}, limit=1, names=_NAMES,
                                     projection=_PROJECTION):
            return _summary(it)
        return None

    def number_at(self, table_id: str, time_ms: int) -> Optional[int]:
        """Reads the log from the newest snapshot made at or before ``time_ms``."""
        self.context.require_table_id(table_id)
        start = max((p.n for p in snapshots.all_pointers(self.context.dynamo, table_id) if p.time_ms <= time_ms),
                    default=0)
        found = None
        for it in self.context.dynamo.query(f"find a transaction of table {table_id} by time", "log",
                                     "table_id = :t AND n >= :n", {":t": s(table_id), ":n": n(start)},
                                     projection="n, time_ms"):
            if (get_n(it, "time_ms") or 0) <= time_ms:
                found = get_n(it, "n")
        return found

    def state_as_of(self, table_id: str, number: int) -> TableState:
        self.context.require_table_id(table_id)
        what = f"read table {table_id} as of transaction {number}"
        pointer = None
        for it in self.context.dynamo.query(what, "snapshots", "table_id = :t AND n <= :n",
                                     {":t": s(table_id), ":n": n(number)}, forward=False, limit=1):
            pointer = snapshots.SnapshotPointer.of(it)
            break
        start = 0 if pointer is None else pointer.n
        items = list(self.context.dynamo.query(what, "log", "table_id = :t AND n BETWEEN :a AND :b",
                                        {":t": s(table_id), ":a": n(start + 1), ":b": n(number)}))
        numbers = [get_n(it, "n") for it in items]
        if numbers != list(range(start + 1, number + 1)):
            raise HistoryError(f"table {table_id} has no transaction {number} in its history")
        state = TableState() if pointer is None else snapshots.load(self.context.blobs, pointer)
        for it in items:
            decode(it, self.context.blobs).apply(state)
        return state

    def prune_history(self, table_id: str, now: int) -> int:
        """See :meth:`StateStore.prune_history`: the retention's expiry as at ``now``."""
        return sum(self.retention.expire(table_id, now_ms=now))

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        return self._key_records(table_id, now_ms)
