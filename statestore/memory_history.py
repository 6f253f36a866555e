"""The in-memory store's history (:mod:`statestore.history`): every commit's summary and
transaction, kept by :class:`~statestore.memory.InMemoryStateStore`; the state as of a
transaction is its table's base state with the transactions after it up to the one
asked for replayed. :meth:`MemoryHistory.prune_history` folds the transactions no
retained state needs into the base (as PostgreSQL forgets its history rows), so a
delete's body leaves the history as on the other backends."""

from __future__ import annotations

from typing import Optional

from statestore.deletes import TOMBSTONE_GOES, KeyRecord
from statestore.history import HistoryError, replay, retention_ms
from statestore.memory_tables import MemoryTables
from statestore.state import TableState
from statestore.summaries import TransactionSummary


class MemoryHistory:
    """The history of :class:`~statestore.memory.InMemoryStateStore`: per table, the state
    after its creation (or after the base number) and every commit since."""

    def __init__(self, tables: MemoryTables) -> None:
        self._t = tables
        self._lock = tables.lock
        self._history = tables.history
        self._first_states = tables.first_states
        self._base_numbers = tables.base_numbers

    def _state(self, table_id: str) -> TableState:
        return self._t.state(table_id)

    def history(self, table_id: str, *, limit: int = 20, upto: Optional[int] = None) -> list[TransactionSummary]:
        with self._lock:
            self._state(table_id)
            found = [h for h, _ in reversed(self._history[table_id]) if upto is None or h.number <= upto]
            return found[:max(0, limit)]

    def history_after(self, table_id: str, number: int) -> Optional[TransactionSummary]:
        with self._lock:
            self._state(table_id)
            return next((h for h, _ in self._history[table_id] if h.number > number), None)

    def number_at(self, table_id: str, time_ms: int) -> Optional[int]:
        with self._lock:
            self._state(table_id)
            return max((h.number for h, _ in self._history[table_id] if h.time_ms <= time_ms), default=None)

    def state_as_of(self, table_id: str, number: int) -> TableState:
        with self._lock:
            self._state(table_id)
            log = self._history[table_id]
            base = self._base_numbers.get(table_id, 0)
            if not base <= number <= base + sum(1 for h, _ in log if h.number > base):
                raise HistoryError(f"table {table_id} has no transaction {number}")
            return replay(self._first_states[table_id].copy(),
                          (t for h, t in log if base < h.number <= number and t is not None))

    def prune_history(self, table_id: str, now: int) -> int:
        """Forget what no retained state needs (as at ``now``): the newest transaction
        committed before the retention began becomes the base (its state kept whole,
        its summary kept, its body and every earlier one dropped), as PostgreSQL keeps
        that row without its undo record. Returns how many entries went."""
        with self._lock:
            self._state(table_id)
            info = self._t.info(table_id)
            start = now - retention_ms(info)
            log = self._history[table_id]
            boundary = max((i for i, (h, _) in enumerate(log) if h.time_ms < start), default=None)
            if boundary is None or (boundary == 0 and log[0][1] is None):
                return 0
            replay(self._first_states[table_id], (t for _, t in log[:boundary + 1] if t is not None))
            self._base_numbers[table_id] = log[boundary][0].number
            log[:boundary + 1] = [(log[boundary][0], None)]
            return boundary

    def delete_key_records(self, table_id: str, now_ms: int) -> list[KeyRecord]:
        """The live tombstones and the delete transactions still in the history."""
        with self._lock:
            state = self._state(table_id)
            info = self._t.info(table_id)
            out = [KeyRecord(f"tombstone {t.number}", t.regions, t.where, TOMBSTONE_GOES)
                   for t in sorted(state.tombstones.values(), key=lambda t: t.number)]
            log = self._history[table_id]
            base = self._first_states[table_id]
            out += [KeyRecord(f"the base of the history (tombstone {t.number})", t.regions, t.where,
                              _HISTORY_GOES) for t in base.tombstones.values()]
            for i, (h, txn) in enumerate(log):
                regions = getattr(txn, "regions", None)
                if h.kind != "delete_records" or regions is None:
                    continue
                after = log[i + 1][0].time_ms if i + 1 < len(log) else None
                out.append(KeyRecord(f"history: the body of transaction {h.number} ({h.detail or 'delete'})",
                                     tuple(regions), getattr(txn, "where", None), _HISTORY_GOES,
                                     None if after is None else after + retention_ms(info)))
            return out


_HISTORY_GOES = ("with the history once a later transaction has been current for sleeper.table.history.retention."
                 "minutes and GC runs")
