"""Worker processes for test_write_buffer_faults (a module of its own so that spawned
processes can import it by name). Each opens its own Sleeper on the same PostgreSQL
database and object store directory."""

from __future__ import annotations

import time
import traceback
from typing import Any

import pyarrow as pa

ROWS_PER_WRITE = 200


def _sleeper(dsn: str, data_dir: str) -> Any:
    from sleeper_ops import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from statestore.postgres import PostgresStateStore

    return Sleeper(state_store=PostgresStateStore(dsn, max_connections=2), objects=ObjectStore(data_dir))


def keys_of(worker: int, writes: int) -> list[int]:
    """The keys writer ``worker`` writes, in order."""
    return [worker * 1_000_000 + i for i in range(writes * ROWS_PER_WRITE)]


def writer(dsn: str, data_dir: str, table: str, worker: int, writes: int, results: Any,
           resume: Any = None) -> None:
    """Write ``writes`` batches of ROWS_PER_WRITE records with the worker's keys; put
    ("ok", worker) or ("error", worker, traceback) on ``results``. With ``resume``, the
    second half of the batches waits until it is set."""
    try:
        keys = keys_of(worker, writes)
        with _sleeper(dsn, data_dir) as s:
            t = s.table(table)
            for i in range(writes):
                if resume is not None and i == writes // 2 and not resume.wait(300):
                    raise TimeoutError("never told to resume")
                part = keys[i * ROWS_PER_WRITE:(i + 1) * ROWS_PER_WRITE]
                t.write(pa.table({"key": pa.array(part, pa.int64()), "v": [f"w{worker}" for _ in part]}))
        results.put(("ok", worker))
    except BaseException:
        results.put(("error", worker, traceback.format_exc()))


def flusher(dsn: str, data_dir: str, table: str, stop: Any, results: Any, flushing: Any = None) -> None:
    """Flush the table again and again until ``stop`` is set, then once more (so every
    record written before ``stop`` was set is flushed); put ("ok", "flusher", records
    flushed) or ("error", "flusher", traceback) on ``results``. ``flushing``, if given,
    is set as the first flush starts (start-up is over)."""
    try:
        flushed = 0
        with _sleeper(dsn, data_dir) as s:
            t = s.table(table)
            while True:
                last = stop.is_set()
                if flushing is not None:
                    flushing.set()
                flushed += t.flush(run_id="test/flusher").records
                if last:
                    break
                time.sleep(0.02)
        results.put(("ok", "flusher", flushed))
    except BaseException:
        results.put(("error", "flusher", traceback.format_exc()))


def flush_hanging_at_commit(dsn: str, data_dir: str, table: str, at_commit: Any) -> None:
    """Start a flush once the buffer holds records; when it is about to commit (its
    files written, named in its job record), set ``at_commit`` and hang there, to be
    SIGKILLed."""
    with _sleeper(dsn, data_dir) as s:
        t = s.table(table)
        store = s.state_store

        def hang(*args: Any, **kwargs: Any) -> bool:
            at_commit.set()
            time.sleep(3600)
            return False
        store.commit = hang
        while t.buffer_stats().rows == 0:
            time.sleep(0.01)
        t.flush(run_id="test/victim")
