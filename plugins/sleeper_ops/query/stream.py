"""A streaming k-way merge of key-ordered batch sources, with bounded memory.

:class:`~sleeper_ops.query.runner.QueryRunner` uses it to stream a query's result:
each source is the rows of one file reference inside one query region, already in
key order. :func:`merge_sources` yields their union in key order, batch by batch,
holding at any time only the current batch of each *open* source plus one batch read
ahead per source, never the whole result.

Sources are opened lazily, in order of their lower bound on the first row key field
(``low``): a source is opened only once the merge has reached its lower bound. Leaf
partitions that divide the first row key field are therefore read one after the other,
not all at once, and a table scan holds the files of about one leaf (plus those of the
leaf's ancestors, whose regions cover it) whatever the number of leaves. A few of the
sources next in line are started ahead (their first batch read in the pool) so their
I/O overlaps the merge.
"""

from __future__ import annotations

import bisect
from collections import deque
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator, Optional, Sequence

import pyarrow as pa

from sleeper_ops.engine import kernels


class BatchSource:
    """One key-ordered stream of record batches, read one batch ahead in ``pool``.

    :meth:`fill` makes :attr:`batch` hold unconsumed rows (False once the stream is
    exhausted); :meth:`take` consumes a prefix of it. At most one read is in flight,
    and :meth:`close` waits for it before closing the stream, so the stream is never
    used by two threads at once. With ``first_inline``, the first two reads are made by
    :meth:`fill`, in the caller's thread (the merge is waiting for the first anyway, and
    a key lookup's second read only finds that its one batch was all: it then costs no
    hop to a pool thread and back), and the rest ahead in the pool.
    """

    def __init__(self, batches: Iterator[pa.RecordBatch], pool: Executor, *, first_inline: bool = False):
        self._batches = batches
        self._pool = pool
        self._inline = 2 if first_inline else 0  # reads still to make in the caller's thread
        self._pending: Optional[Future[Optional[pa.RecordBatch]]] = (
            None if first_inline else pool.submit(next, batches, None))
        self.batch: Optional[pa.RecordBatch] = None

    def fill(self) -> bool:
        """True when :attr:`batch` holds at least one row; False when the stream is done."""
        while self.batch is None or self.batch.num_rows == 0:
            if self._inline:
                self._inline -= 1
                b = next(self._batches, None)
                if b is None:
                    self._inline = 0
                    return False
                if not self._inline:
                    self._pending = self._pool.submit(next, self._batches, None)
                self.batch = b
                continue
            if self._pending is None:
                return False
            b = self._pending.result()
            if b is None:
                self._pending = None
                return False
            self._pending = self._pool.submit(next, self._batches, None)
            self.batch = b
        return True

    @property
    def current(self) -> pa.RecordBatch:
        """:attr:`batch`, after a :meth:`fill` that returned True."""
        assert self.batch is not None
        return self.batch

    def take(self, n: int) -> pa.RecordBatch:
        """The first ``n`` rows of :attr:`batch`, removed from it."""
        assert self.batch is not None
        out, self.batch = self.batch.slice(0, n), self.batch.slice(n)
        return out

    def close(self) -> None:
        self._inline = 0
        if self._pending is not None:
            if not self._pending.cancel():
                try:
                    self._pending.result()
                except BaseException:  # the stream is being abandoned: its error no longer matters
                    pass
            self._pending = None
        self.batch = None
        close = getattr(self._batches, "close", None)
        if close is not None:
            close()


@dataclass(order=True)
class PendingSource:
    """A source not opened yet: ``low`` bounds its first row key field from below."""

    low: Any
    seq: int
    open: Callable[[], Iterator[pa.RecordBatch]] = field(compare=False)
    started: Optional[BatchSource] = field(default=None, compare=False)


def _key(batch: pa.RecordBatch, names: Sequence[str]) -> Callable[[int], tuple[Any, ...]]:
    cols = [batch.column(n) for n in names]
    return lambda i: tuple(c[i].as_py() for c in cols)


def merge_sources(pending: Sequence[PendingSource], key_names: Sequence[str], sort_keys: list[tuple[str, str]],
                  pool: Executor, *, max_rows: int, start_ahead: int = 2) -> Iterator[pa.RecordBatch]:
    """The rows of every source, in key order (row keys then sort keys, ascending), in
    batches of at most ``max_rows`` rows.

    Each source must yield batches in key order with the same schema, and hold no row
    whose first key field is below its ``low``. Closing the generator early closes
    every source it started.
    """
    queue = deque(sorted(pending))
    active: list[BatchSource] = []
    first = key_names[0]

    def start_ahead_of_time(first_inline: bool = False) -> None:
        for i, p in enumerate(list(queue)[:start_ahead]):
            if p.started is None:
                p.started = BatchSource(p.open(), pool, first_inline=first_inline and i == 0)

    def open_next() -> None:
        p = queue.popleft()
        src = p.started if p.started is not None else BatchSource(p.open(), pool)
        p.started = None
        active.append(src)
        start_ahead_of_time()

    try:
        start_ahead_of_time(first_inline=True)  # the merge waits for the first source's first batch
        while True:
            still = []
            for s in active:
                if s.fill():
                    still.append(s)
                else:
                    s.close()
            active[:] = still
            if queue:
                if not active:
                    open_next()
                    continue
                head = min(s.current.column(first)[0].as_py() for s in active)
                if queue[0].low <= head:
                    open_next()
                    continue
            if not active:
                return
            next_low = queue[0].low if queue else None
            bound = min(_key(s.current, key_names)(s.current.num_rows - 1) for s in active)
            parts = []
            for s in active:
                b = s.current
                n = bisect.bisect_right(range(b.num_rows), bound, key=_key(b, key_names))
                if next_low is not None:
                    col = b.column(first)
                    n = min(n, bisect.bisect_left(range(b.num_rows), next_low, key=lambda i: col[i].as_py()))
                if n:
                    parts.append(s.take(n))
            if len(parts) == 1 and parts[0].num_rows <= max_rows:
                yield parts[0]
            elif parts:
                t = pa.Table.from_batches(parts)
                if len(parts) > 1:
                    t = kernels.sorted_by(t, sort_keys)
                yield from t.combine_chunks().to_batches(max_chunksize=max_rows)
    finally:
        for s in active:
            s.close()
        for p in queue:
            if p.started is not None:
                p.started.close()


def limited(batches: Iterator[pa.RecordBatch], limit: Optional[int]) -> Generator[pa.RecordBatch, None, None]:
    """The first ``limit`` rows of ``batches`` (all with None); stops pulling, and closes
    ``batches``, as soon as it has them."""
    try:
        if limit is None:
            yield from batches
            return
        left = limit
        if left <= 0:
            return
        for b in batches:
            if b.num_rows >= left:
                yield b.slice(0, left)
                return
            left -= b.num_rows
            yield b
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
