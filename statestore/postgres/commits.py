"""One commit attempt: BEGIN and the reads of the touched rows (and of the commit's
bookkeeping: its id, its job's record, its ingest requests) in one pipeline; validate
and apply in memory; the writes, the bookkeeping and COMMIT in another. A refusal
writes nothing and is committed read-only, so PostgreSQL confirms it was based on a
serializable view. A commit whose id is already recorded applies nothing."""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

import psycopg
from psycopg.pq import TransactionStatus

from statestore.bookkeeping import Bookkeeping
from statestore.client_writes import ClientWriteRecord
from statestore.clock import now_ms
from statestore.errors import BookkeepingError, TableNotFoundError, TransactionError
from statestore.jobs import check_job_bookkeeping
from statestore.postgres.diff import Diff, log_change
from statestore.postgres.history import log_history
from statestore.postgres.jobs import upsert_job
from statestore.postgres.rows import (
    JOB_COLUMNS,
    TOMBSTONES,
    fill_fragment,
    fill_state,
    fill_tombstones,
    gc_paused,
    job_from_row,
    read_all,
    read_fragment,
)
from statestore.state import TableState
from statestore.transactions import Touches, Transaction

T = TypeVar("T")

#: transactions naming more files than this pause the cyclic garbage collector while
#: they build their fragment (it would otherwise rescan the growing heap many times)
LARGE_TRANSACTION = 5000

_BEGIN_SERIALIZABLE = "BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE"

def rollback_quietly(conn: psycopg.Connection[Any]) -> None:
    if conn.closed or conn.info.transaction_status not in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection is discarded by the pool

def pipelined(conn: psycopg.Connection[Any], body: Callable[[], T]) -> T:
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



#: returned by :func:`commit_attempt` when the commit id was already applied
ALREADY_APPLIED = "already applied"


def _check_bookkeeping(conn: psycopg.Connection[Any], table_id: str,
                       books: Bookkeeping) -> Callable[[], Optional[str]]:
    """Send the bookkeeping reads; the returned function checks them (after the
    pipeline's reads), returning ALREADY_APPLIED or None, or raising BookkeepingError.

    The commit id is looked up only when it may have been applied (``check_id``):
    reading it takes a predicate lock on an index page that concurrent commits insert
    into, which would turn unrelated commits into serialization failures."""
    seen = None if not books.check_id else conn.execute(
        "SELECT 1 FROM commit_ids WHERE table_id = %s AND commit_id = %s", (table_id, books.commit_id))
    job = None if books.job is None else conn.execute(
        f"SELECT {JOB_COLUMNS} FROM jobs WHERE table_id = %s AND job_id = %s", (table_id, books.job.job_id))
    requests = None if books.ingest_job_id is None else conn.execute(
        "SELECT count(*) FROM ingest_requests WHERE table_id = %s AND job_id = %s AND status = 'assigned'",
        (table_id, books.ingest_job_id))
    wanted = sorted(set(books.buffer_seqs))
    buffered = None if not wanted else conn.execute(
        "SELECT count(*) FROM write_buffer WHERE table_id = %s AND seq = ANY(%s::bigint[])", (table_id, wanted))
    keyed = None if books.client_write is None else conn.execute(
        "SELECT request_id, digest, seq, answer, written_ms FROM client_writes WHERE table_id = %s AND request_id = %s",
        (table_id, books.client_write.request_id))

    def check() -> Optional[str]:
        if seen is not None and seen.fetchone() is not None:
            return ALREADY_APPLIED
        row = None if keyed is None else keyed.fetchone()
        if row is not None and books.client_write is not None:  # raises IdempotencyKeyReusedError for another request
            ClientWriteRecord(*row).answer_for(table_id, books.client_write)
            return ALREADY_APPLIED
        if job is not None and books.job is not None:
            row = job.fetchone()
            stored = None if row is None else job_from_row(row)
            if (books.check_id and stored is not None and stored.status == "committed"
                    and stored.outputs == books.job.outputs):
                return ALREADY_APPLIED  # the job's record is this commit's ledger entry
            check_job_bookkeeping(stored, books.job)
        if requests is not None:
            row = requests.fetchone()
            if row is None or not row[0]:
                raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                       f"{books.ingest_job_id} any more")
        if buffered is not None:
            row = buffered.fetchone()
            if row is None or row[0] != len(wanted):
                raise BookkeepingError(f"write buffer entries of table {table_id} named by this flush are no longer "
                                       "buffered (flushed by another flush)")
        return None
    return check


def _write_bookkeeping(cur: psycopg.Cursor[Any], table_id: str, books: Bookkeeping, number: int) -> None:
    """The commit's bookkeeping, in its transaction. A commit that saves its job's
    record needs no row in ``commit_ids``: the committed record, naming this attempt's
    outputs (fresh for every attempt), says the commit applied. A client's key is
    inserted after it was read absent in this serializable transaction, so a concurrent
    first use of the key makes one of the two a serialization failure (retried: it then
    reads the key)."""
    if books.client_write is not None:
        w = books.client_write
        cur.execute("INSERT INTO client_writes (table_id, request_id, digest, seq, answer, written_ms)"
                    " VALUES (%s, %s, %s, %s, %s, %s)", (table_id, w.request_id, w.digest, number, w.answer, now_ms()))
    if books.job is not None:
        upsert_job(cur, books.job)
    else:
        cur.execute("INSERT INTO commit_ids (table_id, commit_id, applied_ms) VALUES (%s, %s, %s)",
                    (table_id, books.commit_id, now_ms()))
    if books.ingest_job_id is not None:
        cur.execute("UPDATE ingest_requests SET status = 'ingested'"
                    " WHERE table_id = %s AND job_id = %s AND status = 'assigned'", (table_id, books.ingest_job_id))
    if books.buffer_seqs:
        cur.execute("DELETE FROM write_buffer WHERE table_id = %s AND seq = ANY(%s::bigint[])",
                    (table_id, sorted(set(books.buffer_seqs))))
        cur.execute("INSERT INTO write_buffer_flushes (table_id, flushes) VALUES (%s, 1) ON CONFLICT (table_id)"
                    " DO UPDATE SET flushes = write_buffer_flushes.flushes + 1", (table_id,))


def commit_attempt(conn: psycopg.Connection[Any], table_id: str, txn: Transaction,
                    touches: Touches, books: Bookkeeping) -> Optional[TransactionError | str]:
    """One attempt at a commit, in few round trips: BEGIN and the reads go in one
    pipeline; the writes and COMMIT in another (or with COPY, for large inserts).
    Returns the TransactionError refusing ``txn``, ALREADY_APPLIED, or None (applied)."""
    large = touches.whole_table or len(touches.filenames) > LARGE_TRANSACTION

    def read() -> tuple[Optional[str], TableState]:
        conn.execute(_BEGIN_SERIALIZABLE)
        table = conn.execute("SELECT 1 FROM tables WHERE table_id = %s", (table_id,))
        check = _check_bookkeeping(conn, table_id, books)
        tombstones = (conn.execute(TOMBSTONES, (table_id,))
                      if touches.tombstones or touches.whole_table else None)
        if touches.whole_table:
            reads = read_all(conn, table_id)
            if table.fetchone() is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            state = fill_state(TableState(), *(c.fetchall() for c in reads))
        else:
            partitions, files = read_fragment(conn, table_id, touches)
            if table.fetchone() is None:
                raise TableNotFoundError(f"no table with id {table_id}")
            state = fill_fragment(partitions.fetchall() if partitions else [], files.fetchall() if files else [])
        return check(), fill_tombstones(state, tombstones.fetchone() if tombstones is not None else None)

    try:
        with gc_paused(large):
            try:
                done, fragment = pipelined(conn, read)
            except BookkeepingError as e:
                conn.execute("COMMIT")
                return e
            if done is not None:
                conn.execute("COMMIT")
                return done
            before = fragment.copy()
            try:
                txn.validate(fragment)
            except TransactionError as e:
                # nothing written; committing confirms the reads were serializable
                conn.execute("COMMIT")
                return e
            number = txn.number_in(fragment)
            txn.apply(fragment)
            diff = Diff.between(before, fragment)
        with conn.cursor() as cur:
            job_id = books.job.job_id if books.job is not None else None
            if diff.needs_copy():
                diff.write(cur, table_id)
                log_change(cur, table_id, diff)
                log_history(cur, table_id, txn, diff, before, fragment, job_id, now_ms())
                _write_bookkeeping(cur, table_id, books, number)
                cur.execute("COMMIT")
            else:
                def write() -> None:
                    diff.write(cur, table_id)
                    log_change(cur, table_id, diff)
                    log_history(cur, table_id, txn, diff, before, fragment, job_id, now_ms())
                    _write_bookkeeping(cur, table_id, books, number)
                    cur.execute("COMMIT")
                pipelined(conn, write)
        return None
    except BaseException:
        rollback_quietly(conn)
        raise
