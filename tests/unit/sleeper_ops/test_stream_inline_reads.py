"""A stream's first source is read in the caller's thread for its first two reads, then
ahead in the pool (sleeper_ops.query.stream.BatchSource with ``first_inline``): a key
lookup, whose one batch is followed by the end of its source, hands nothing to a pool
thread, and a longer source is still read one batch ahead."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterator

import pyarrow as pa

from sleeper_ops.query.stream import BatchSource, PendingSource, merge_sources


class CountingPool(ThreadPoolExecutor):
    """A pool counting the reads handed to it."""

    def __init__(self) -> None:
        super().__init__(2)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def batches(n: int, readers: list[str]) -> Iterator[pa.RecordBatch]:
    for i in range(n):
        readers.append(threading.current_thread().name)
        yield pa.record_batch({"k": pa.array([i * 10, i * 10 + 1], pa.int64())})
    readers.append(threading.current_thread().name)  # the read that finds the end


def test_a_one_batch_source_is_read_without_the_pool() -> None:
    pool, readers = CountingPool(), []
    merged = merge_sources([PendingSource(0, 0, lambda: batches(1, readers))], ["k"], [("k", "ascending")], pool,
                           max_rows=100)
    assert [b.num_rows for b in merged] == [2]
    pool.shutdown()
    assert pool.submitted == 0
    assert readers == [threading.current_thread().name] * 2


def test_a_longer_source_is_read_ahead_from_its_third_read() -> None:
    pool, readers = CountingPool(), []
    src = BatchSource(batches(4, readers), pool, first_inline=True)
    got = []
    while src.fill():
        got.append(src.take(src.current.num_rows).column(0).to_pylist())
    src.close()
    pool.shutdown()
    assert got == [[0, 1], [10, 11], [20, 21], [30, 31]]
    me = threading.current_thread().name
    assert readers[:2] == [me, me] and me not in readers[2:]
    assert pool.submitted == 3  # the third and fourth batches and the end, each one ahead
