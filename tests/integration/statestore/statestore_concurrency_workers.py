"""Worker processes for test_concurrency (a module of its own so that spawned
processes can import it by name)."""

from __future__ import annotations

import traceback
from typing import Any


def add_files_worker(dsn: str, table_id: str, leaf_ids: list[str], worker: int, commits: int,
                     files_per_commit: int, barrier: Any, results: Any) -> None:
    """Wait for every worker, then commit ``commits`` AddFiles of ``files_per_commit``
    new files each; put ("ok", worker) or ("error", worker, traceback) on ``results``."""
    try:
        from statestore import AddFiles, FileReference
        from statestore.postgres import PostgresStateStore

        store = PostgresStateStore(dsn, max_connections=1)
        try:
            store.list_tables()  # connect (and check migrations) before the race starts
            barrier.wait(timeout=60)
            for c in range(commits):
                refs = tuple(FileReference(f"w{worker}/c{c}/f{i}.parquet", leaf_ids[(c + i) % len(leaf_ids)], i + 1)
                             for i in range(files_per_commit))
                store.commit(table_id, AddFiles(refs))
        finally:
            store.close()
        results.put(("ok", worker))
    except BaseException:
        results.put(("error", worker, traceback.format_exc()))
