"""One commit attempt: BEGIN and the reads of the touched rows in one pipeline; validate
and apply in memory; the writes and COMMIT in another. A refusal writes nothing and is
committed read-only, so PostgreSQL confirms it was based on a serializable view."""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from statestore.errors import TableNotFoundError, TransactionError
from statestore.postgres.diff import _Diff
from statestore.postgres.rows import _fill, _fill_fragment, _gc_paused, _read_all, _read_fragment
from statestore.state import TableState
from statestore.transactions import Touches, Transaction

T = TypeVar("T")

#: transactions naming more files than this pause the cyclic garbage collector while
#: they build their fragment (it would otherwise rescan the growing heap many times)
LARGE_TRANSACTION = 5000

_BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE"

def _rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    if conn.closed or conn.info.transaction_status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection is discarded by the pool

def _pipelined(conn: psycopg.Connection[Any], body: Callable[[], T]) -> T:
    """Run ``body`` in pipeline mode. An error raised in ``body`` wins over the
    "pipeline aborted" that ending the pipeline then reports (which psycopg would
    otherwise log); an error that only shows at the final sync is raised as is."""
    failure: Optional[BaseException] = None
    result: Optional[T] = None
    try:
        with conn.pipeline():
            try:
                result = body()
            except BaseException as e:
                failure = e
    except psycopg.Error as e:
        failure = failure or e
    if failure is not None:
        raise failure
    return result  # type: ignore[return-value]

def _commit_attempt(conn: psycopg.Connection[Any], table_id: str, txn: Transaction,
                    touches: Touches) -> Optional[TransactionError]:
    """One attempt at a commit, in few round trips: BEGIN and the reads go in one
    pipeline; the writes and COMMIT in another (or with COPY, for large inserts).
    Returns the TransactionError refusing ``txn``, if any."""
    large = touches.whole_table or len(touches.filenames) > LARGE_TRANSACTION

    def read() -> TableState:
        conn.execute(_BEGIN_SERIALIZABLE)
        table = conn.execute("SELECT 1 FROM tables WHERE table_id = %s", (table_id,))
        if touches.whole_table:
            reads = _read_all(conn, table_id)
            if table.fetchone() is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            return _fill(TableState(), *(c.fetchall() for c in reads))
        partitions, files = _read_fragment(conn, table_id, touches)
        if table.fetchone() is None:
            raise TableNotFoundError(f"no table with id {table_id}")
        return _fill_fragment(partitions.fetchall() if partitions else [], files.fetchall() if files else [])

    try:
        with _gc_paused(large):
            fragment = _pipelined(conn, read)
            before = fragment.copy()
            try:
                txn.validate(fragment)
            except TransactionError as e:
                # nothing written; committing confirms the reads were serializable
                conn.execute("COMMIT")
                return e
            txn.apply(fragment)
            diff = _Diff.between(before, fragment)
        with conn.cursor() as cur:
            if diff.needs_copy():
                diff.write(cur, table_id)
                cur.execute("COMMIT")
            else:
                def write() -> None:
                    diff.write(cur, table_id)
                    cur.execute("COMMIT")
                _pipelined(conn, write)
        return None
    except BaseException:
        _rollback_quietly(conn)
        raise
