"""One commit to a table's transaction log, with its bookkeeping.

A commit validates its transaction against the cached state after transaction ``n``
and writes, in one TransactWriteItems:

0. the log item ``n + 1``, conditional on it not existing (another committer may have
   taken the number: then the committer catches up, validates again and retries);
1. a condition check that the table is still in the catalog;
2. the commit id item ``c#<id>``, conditional on it not existing (if it does, the
   commit was applied before: nothing is written and the commit returns False);
3. with ``job=``: the job's record, conditional on the revision read when the
   bookkeeping was checked (:func:`statestore.jobs.check_job_bookkeeping`); a large
   record is spilled to the blob store first (:mod:`statestore.dynamodb.jobs`);
4. with ``ingest_job_id=``: the job's ``e#`` item saying its requests were ingested,
   conditional on the job not having ended (see :mod:`statestore.dynamodb.ingest_queue`);
5. with ``buffer_seqs=`` (a flush): the deletion of each write-buffer entry, conditional
   on it existing, and the buffer head's update (:mod:`statestore.dynamodb.buffer`);
6. with ``client_write=``: the client's key item ``w#<key>`` with its request's digest,
   conditional on the key not being held (:mod:`statestore.dynamodb.client_writes`): when
   it is, the transaction is cancelled and the next try's read of the key answers (the
   first result for the same digest, IdempotencyKeyReusedError for another). Through
   group commit, the leader reads the key item with the request's other items and
   writes it in the batch (:mod:`statestore.dynamodb.group_commit`).

So the data and the bookkeeping apply together or not at all, in at most 5 items plus a
flush's entries. :class:`CommitItems` reads the bookkeeping and builds those items; the
items 3 to 6 come from the roles that own them (:class:`~.jobs.DynamoJobs`,
:class:`~.ingest_queue.DynamoIngestQueue`, :class:`~.buffer.DynamoWriteBuffer`,
:class:`~.client_writes.DynamoClientWrites`), and the one TransactWriteItems is
written by the commit (:mod:`.table_commits`, or a leader's batch, :mod:`.group_commit`).
"""

from __future__ import annotations

from typing import Any, Optional

from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb.buffer import DynamoWriteBuffer
from statestore.dynamodb.client_writes import DynamoClientWrites
from statestore.dynamodb.connection import n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.ingest_queue import DynamoIngestQueue
from statestore.dynamodb.jobs import DynamoJobs, EncodedJob
from statestore.dynamodb.log import EncodedTransaction
from statestore.errors import BookkeepingError
from statestore.jobs import check_job_bookkeeping

#: positions of the first items of a commit's TransactWriteItems (then the job, the ingest job)
LOG, TABLE, COMMIT_ID = range(3)


def commit_id_key(table_id: str, commit_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"c#{commit_id}")}


class CommitItems:
    """The bookkeeping reads and the items of a commit, over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext` and the roles whose items a
    commit carries."""

    def __init__(self, context: DynamoContext, jobs: DynamoJobs, ingest_queue: DynamoIngestQueue,
                 write_buffer: DynamoWriteBuffer, client_writes: DynamoClientWrites) -> None:
        self.context = context
        self.jobs = jobs
        self.ingest_queue = ingest_queue
        self.write_buffer = write_buffer
        self.client_writes = client_writes

    def check_bookkeeping(self, table_id: str, books: Bookkeeping) -> tuple[bool, Optional[int], Optional[str]]:
        """Whether the commit was applied already, the revision of its job's record
        (None: none stored) and the blob holding that record (None: inline or none).
        Raises BookkeepingError when the bookkeeping does not hold.
        With ``buffer_seqs``, remembers the records and blobs of those entries in
        ``books`` terms: see :meth:`flushed`."""
        if books.check_id and self.context.dynamo.get(f"look up commit {books.commit_id}", "items",
                                               commit_id_key(table_id, books.commit_id)) is not None:
            return True, None, None
        write = books.client_write
        if write is not None and self.client_writes.earlier_write(table_id, write) is not None:
            return True, None, None
        rev = blob = None
        if books.job is not None:
            stored, rev, blob = self.jobs.read_job(table_id, books.job.job_id)
            if (books.check_id and stored is not None and stored.status == "committed"
                    and stored.outputs == books.job.outputs):
                return True, None, None  # the job's record is this commit's ledger entry
            check_job_bookkeeping(stored, books.job)
        if books.ingest_job_id is not None and not self.ingest_queue.assigned_to(table_id, books.ingest_job_id):
            raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                   f"{books.ingest_job_id} any more")
        return False, rev, blob

    def flushed(self, table_id: str, books: Bookkeeping) -> tuple[int, list[str]]:
        """The records and blob keys of the flush's entries; BookkeepingError when any
        is gone (another flush took it)."""
        found = self.write_buffer.buffered_rows(table_id, books.buffer_seqs)
        if found is None:
            raise BookkeepingError(f"write buffer entries of table {table_id} named by this flush are no longer "
                                   "buffered (flushed by another flush)")
        return found

    def items(self, table_id: str, number: int, encoded: EncodedTransaction, books: Bookkeeping,
              job_rev: Optional[int], now_ms: int, flushed_rows: int = 0, job_encoded: Optional[EncodedJob] = None,
              summary: Optional[dict[str, Any]] = None, number_in: int = 0) -> list[dict[str, Any]]:
        """The items of a commit's TransactWriteItems logging ``encoded`` as transaction
        ``number`` (see the module docstring for what they are, in this order)."""
        d = self.context.dynamo
        log_item = encoded.item(table_id, number, books.commit_id, now_ms)
        if summary is not None:
            log_item["summary"] = summary  # statestore.dynamodb.history
        items: list[dict[str, Any]] = [
            {"Put": {"TableName": d.table("log"), "Item": log_item,
                     "ConditionExpression": "attribute_not_exists(n)"}},
            {"ConditionCheck": {"TableName": d.table("catalog"), "Key": {"pk": s(f"id#{table_id}")},
                                "ConditionExpression": "attribute_exists(pk)"}},
            {"Put": {"TableName": d.table("items"), "Item": {
                **commit_id_key(table_id, books.commit_id), "applied_ms": n(now_ms), "n": n(number)},
                "ConditionExpression": "attribute_not_exists(sk)"}},
        ]
        if books.job is not None:
            assert job_encoded is not None
            items.append(self.jobs.record_put(books.job, job_rev, job_encoded))
        if books.ingest_job_id is not None:
            items.append(self.ingest_queue.ended_put(table_id, books.ingest_job_id))
        if books.buffer_seqs:
            items += self.write_buffer.flush_items(table_id, books.buffer_seqs, flushed_rows)
        if books.client_write is not None:
            items.append(self.client_writes.key_put(table_id, books.client_write, number_in, now_ms))
        return items
