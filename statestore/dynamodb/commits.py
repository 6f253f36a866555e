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
flush's entries.
"""

from __future__ import annotations

from typing import Any, Optional

from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb.buffer import HEAD, WriteBufferMixin, entry_key
from statestore.dynamodb.client_writes import key_put
from statestore.dynamodb.connection import n, s
from statestore.dynamodb.ingest_queue import IngestQueueMixin, ended_item
from statestore.dynamodb.jobs import EncodedJob, JobsMixin, job_put
from statestore.dynamodb.log import EncodedTransaction
from statestore.errors import BookkeepingError
from statestore.jobs import check_job_bookkeeping

#: positions of the first items of a commit's TransactWriteItems (then the job, the ingest job)
LOG, TABLE, COMMIT_ID = range(3)




def commit_id_key(table_id: str, commit_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"c#{commit_id}")}


class CommitsMixin(JobsMixin, IngestQueueMixin, WriteBufferMixin):
    """The bookkeeping reads and the writes of a commit."""

    def _check_bookkeeping(self, table_id: str, books: Bookkeeping) -> tuple[bool, Optional[int], Optional[str]]:
        """Whether the commit was applied already, the revision of its job's record
        (None: none stored) and the blob holding that record (None: inline or none).
        Raises BookkeepingError when the bookkeeping does not hold.
        With ``buffer_seqs``, remembers the records and blobs of those entries in
        ``books`` terms: see :meth:`_flushed`."""
        if books.check_id and self.context.dynamo.get(f"look up commit {books.commit_id}", "items",
                                               commit_id_key(table_id, books.commit_id)) is not None:
            return True, None, None
        if books.client_write is not None and self.earlier_write(table_id, books.client_write) is not None:
            return True, None, None
        rev = blob = None
        if books.job is not None:
            stored, rev, blob = self._read_job(table_id, books.job.job_id)
            if (books.check_id and stored is not None and stored.status == "committed"
                    and stored.outputs == books.job.outputs):
                return True, None, None  # the job's record is this commit's ledger entry
            check_job_bookkeeping(stored, books.job)
        if books.ingest_job_id is not None and not self._assigned_to(table_id, books.ingest_job_id):
            raise BookkeepingError(f"no ingest request of table {table_id} is assigned to job "
                                   f"{books.ingest_job_id} any more")
        return False, rev, blob

    def _flushed(self, table_id: str, books: Bookkeeping) -> tuple[int, list[str]]:
        """The records and blob keys of the flush's entries; BookkeepingError when any
        is gone (another flush took it)."""
        found = self._buffered_rows(table_id, books.buffer_seqs)
        if found is None:
            raise BookkeepingError(f"write buffer entries of table {table_id} named by this flush are no longer "
                                   "buffered (flushed by another flush)")
        return found

    def _commit_items(self, table_id: str, number: int, encoded: EncodedTransaction, books: Bookkeeping,
                      job_rev: Optional[int], now_ms: int, flushed_rows: int = 0,
                      job_encoded: Optional[EncodedJob] = None,
                      summary: Optional[dict[str, Any]] = None, number_in: int = 0) -> list[dict[str, Any]]:
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
            items.append({"Put": job_put(d.table("items"), books.job, job_rev, job_encoded)})
        if books.ingest_job_id is not None:
            items.append({"Put": {"TableName": d.table("items"),
                                  "Item": ended_item(table_id, books.ingest_job_id, True),
                                  "ConditionExpression": "attribute_not_exists(sk)"}})
        if books.buffer_seqs:
            for q in sorted(set(books.buffer_seqs)):
                items.append({"Delete": {"TableName": d.table("items"), "Key": entry_key(table_id, q),
                                         "ConditionExpression": "attribute_exists(sk)"}})
            items.append({"Update": {"TableName": d.table("items"), "Key": {"table_id": s(table_id), "sk": s(HEAD)},
                                     "UpdateExpression": "ADD held :r, flushes :one",
                                     "ExpressionAttributeValues": {":r": n(-flushed_rows), ":one": n(1)}}})
        if books.client_write is not None:
            items.append(key_put(d.table("items"), table_id, books.client_write, number_in, now_ms))
        return items
