"""The in-memory store's history (:mod:`statestore.history`): every commit's summary and
transaction, kept by :class:`~statestore.memory.InMemoryStateStore`; the state as of a
transaction is its table's first state with the transactions up to it replayed."""

from __future__ import annotations

import threading
from typing import Optional

from statestore.history import HistoryError, TransactionSummary, replay
from statestore.state import TableState
from statestore.store import StateStore
from statestore.transactions import Transaction


class MemoryHistoryMixin(StateStore):
    """The history part of :class:`~statestore.memory.InMemoryStateStore`."""

    _lock: threading.RLock
    # table id -> the state after create_table, and (summary, transaction) of every commit since
    _first_states: dict[str, TableState]
    _history: dict[str, list[tuple[TransactionSummary, Transaction]]]

    def _state(self, table_id: str) -> TableState:
        raise NotImplementedError

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
            if not 0 <= number <= len(log):
                raise HistoryError(f"table {table_id} has no transaction {number}")
            return replay(self._first_states[table_id].copy(), (t for _, t in log[:number]))
