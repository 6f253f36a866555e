"""Operation leases: one row per lease, taken when free or expired (server clock), renewed
by its holder, released only by its holder."""

from __future__ import annotations

from typing import Any, Optional

import psycopg
from psycopg import IsolationLevel

from statestore.leases import Lease
from statestore.postgres.connections import PostgresConnection


class PostgresLeases:
    """The leases of :class:`~statestore.postgres.store.PostgresStateStore`."""

    def __init__(self, db: PostgresConnection) -> None:
        self._db = db

    # ----- leases ---------------------------------------------------------------------
    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[Lease]:
            cur.execute(
                "INSERT INTO leases (name, holder, expires_at)"
                " VALUES (%(n)s, %(h)s, clock_timestamp() + make_interval(secs => %(t)s))"
                " ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at"
                " WHERE leases.holder = EXCLUDED.holder OR leases.expires_at <= clock_timestamp()"
                " RETURNING (extract(epoch FROM expires_at) * 1000)::bigint",
                {"n": name, "h": holder, "t": float(ttl_seconds)})
            row = cur.fetchone()
            return None if row is None else Lease(name, holder, row[0])

        return self._db.run(f"acquire lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def release_lease(self, name: str, holder: str) -> bool:
        def fn(cur: psycopg.Cursor[Any]) -> bool:
            cur.execute("DELETE FROM leases WHERE name = %s AND holder = %s", (name, holder))
            return cur.rowcount > 0

        return self._db.run(f"release lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED)

    def get_lease(self, name: str) -> Optional[Lease]:
        def fn(cur: psycopg.Cursor[Any]) -> Optional[Lease]:
            cur.execute("SELECT holder, (extract(epoch FROM expires_at) * 1000)::bigint FROM leases"
                        " WHERE name = %s AND expires_at > clock_timestamp()", (name,))
            row = cur.fetchone()
            return None if row is None else Lease(name, row[0], row[1])

        return self._db.run(f"read lease {name}", fn, isolation=IsolationLevel.READ_COMMITTED, read_only=True)
