"""Test support: make a table's unreferenced files look older than the GC delay.

``sleeper.table.gc.delay.minutes`` has a floor of 1 minute (a safety rule), so tests
that want garbage collection to delete right away move the files' update times back
instead of setting the delay to 0. Works on the in-memory and the PostgreSQL stores.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def age_files(store: Any, table_id: str, minutes: float = 60) -> None:
    """Move every tracked file's update time of the table ``minutes`` into the past."""
    shift = int(minutes * 60_000)
    if hasattr(store, "tables"):  # InMemoryStateStore
        with store.tables.lock:
            files = store.tables.states[table_id].files
            for name, rec in list(files.items()):
                files[name] = dataclasses.replace(rec, update_time=rec.update_time - shift)
        return

    def fn(cur: Any) -> None:
        cur.execute("UPDATE files SET update_time = update_time - %s WHERE table_id = %s", (shift, table_id))

    store.db.run(f"age the files of table {table_id}", fn)
