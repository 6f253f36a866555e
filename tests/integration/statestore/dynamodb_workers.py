"""Worker processes for test_dynamodb (a module of its own so that spawned processes
can import it by name)."""

from __future__ import annotations

import traceback
from typing import Any


def add_files_worker(options: dict[str, Any], table_id: str, leaf_ids: list[str], worker: int, commits: int,
                     files_per_commit: int, barrier: Any, results: Any) -> None:
    """Wait for every worker, then commit ``commits`` AddFiles of ``files_per_commit``
    new files each through a DynamoDB store of its own; put ("ok", worker, retries) or
    ("error", worker, traceback) on ``results``."""
    try:
        from statestore import AddFiles, FileReference
        from statestore.dynamodb import open_dynamodb
        from statestore.retry import Backoff

        pauses = []

        class Counting(Backoff):
            def pause(self, attempt: int) -> None:
                pauses.append(attempt)
                super().pause(attempt)

        store = open_dynamodb(**options, backoff=Counting(max_attempts=200))
        try:
            store.load_state(table_id)  # connect and load before the race starts
            barrier.wait(timeout=60)
            for c in range(commits):
                refs = tuple(FileReference(f"w{worker}/c{c}/f{i}.parquet", leaf_ids[(c + i) % len(leaf_ids)], i + 1)
                             for i in range(files_per_commit))
                store.commit(table_id, AddFiles(refs))
        finally:
            store.close()
        results.put(("ok", worker, len(pauses)))
    except BaseException:
        results.put(("error", worker, traceback.format_exc()))
