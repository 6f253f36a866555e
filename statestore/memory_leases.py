"""The in-memory store's leases (:mod:`statestore.leases`): one dict of the store's
:class:`~statestore.memory_tables.MemoryTables` under its lock; a lease held past its
expiry counts as free."""

from __future__ import annotations

from typing import Optional

from statestore.clock import now_ms
from statestore.leases import Lease
from statestore.memory_tables import MemoryTables


class MemoryLeases:
    """The leases of :class:`~statestore.memory.InMemoryStateStore`."""

    def __init__(self, tables: MemoryTables) -> None:
        self._lock = tables.lock
        self._leases = tables.leases

    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        now = now_ms()
        with self._lock:
            cur = self._leases.get(name)
            if cur is not None and cur.holder != holder and cur.expires_ms > now:
                return None
            lease = Lease(name, holder, now + int(ttl_seconds * 1000))
            self._leases[name] = lease
            return lease

    def release_lease(self, name: str, holder: str) -> bool:
        with self._lock:
            cur = self._leases.get(name)
            if cur is None or cur.holder != holder:
                return False
            del self._leases[name]
            return True

    def get_lease(self, name: str) -> Optional[Lease]:
        with self._lock:
            cur = self._leases.get(name)
            return cur if cur is not None and cur.expires_ms > now_ms() else None
