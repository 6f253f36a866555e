"""Job status records in DynamoDB: one item ``j#<job id>`` per job in the table's
partition of the ``items`` table, holding the record (JSON) and a revision, indexed by
creation time and by being open (:mod:`statestore.dynamodb.job_index`), so listings and
the orphan sweep read bounded pages.

A record too large for an item (a job with thousands of outputs: DynamoDB items hold
at most 400 KB) is spilled to the store's blob store, as transaction bodies are: the
item then holds ``record_key``, a fresh key per save, written before the item (so an
item always names a complete record) and read back transparently. A save deletes the
record blob of the revision it replaced; a reader that finds a blob gone (replaced
meanwhile) reads the item again.

A save reads the stored record, applies :func:`statestore.jobs.saves_over` (a
committed record is final; a superseded attempt cannot overwrite its successor) and
writes conditionally on the revision it read, retrying when another save came first:
the rule holds however saves race. A commit saving its job's record writes the item
in the same TransactWriteItems as the log item (:mod:`statestore.dynamodb.commits`): it
reads the stored record with :meth:`DynamoJobs.read_job` and takes the item from
:meth:`DynamoJobs.record_put`.

:class:`DynamoJobs` is the store's job tracker role.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
import zlib
from typing import Any, NamedTuple, Optional, Sequence

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import cancellation_codes, get_n, get_s, is_condition_failed, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.job_index import PAGE, drop_open_entry, ensure_indexed, index_puts, open_entries, time_pages
from statestore.dynamodb.writes import cleanup_on_refusal, delete_quietly
from statestore.errors import CommitConflictError, StateStoreUnavailableError, TableNotFoundError
from statestore.jobs import JobRecord, saves_over

log = logging.getLogger(__name__)

#: a record's JSON up to this many characters is kept in its item (items hold 400 KB)
RECORD_INLINE_LIMIT = 300_000
#: how often a reader reads an item again when the record blob it names was replaced meanwhile
_REREADS = 5


def job_key(table_id: str, job_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"j#{job_id}")}


class EncodedJob(NamedTuple):
    """A record ready to be saved: the item's record attributes, and the key of the blob
    holding the record when it was spilled (written already; None: inline)."""

    attrs: dict[str, Any]
    blob_key: Optional[str]


def encode_job(blobs: BlobStore, record: JobRecord) -> EncodedJob:
    """The record's item attributes; a record over :data:`RECORD_INLINE_LIMIT` is
    written to a fresh blob first and the attributes name it."""
    text = json.dumps(record.to_dict(), separators=(",", ":"))
    if len(text) <= RECORD_INLINE_LIMIT:
        return EncodedJob({"record": s(text)}, None)
    key = f"jobs/{record.table_id}/{record.job_id}/{uuid.uuid4().hex}.json.z"
    blobs.put(key, zlib.compress(text.encode(), 1))
    return EncodedJob({"record_key": s(key)}, key)


def record_blob(item: dict[str, Any]) -> Optional[str]:
    """The key of the blob holding the item's record (None: the record is inline)."""
    return get_s(item, "record_key")


def job_from_item(item: dict[str, Any], blobs: BlobStore) -> JobRecord:
    """The record of a job item (read from its blob when spilled), with the heartbeat
    that :meth:`DynamoJobs.heartbeat_jobs` keeps beside it (an attribute of its own, so
    a beat rewrites no record)."""
    key = record_blob(item)
    text = zlib.decompress(blobs.get(key)).decode() if key else (get_s(item, "record") or "{}")
    record = JobRecord.from_dict(json.loads(text))
    beat = get_n(item, "heartbeat_ms")
    return record if beat is None else record.beating(beat)


def job_put(table: str, record: JobRecord, read_rev: Optional[int], encoded: EncodedJob) -> dict[str, Any]:
    """A Put of ``record`` (``encoded``) conditional on the stored revision still being
    ``read_rev`` (None: no record stored)."""
    put: dict[str, Any] = {"TableName": table, "Item": {
        **job_key(record.table_id, record.job_id), **encoded.attrs, "rev": n((read_rev or 0) + 1)}}
    if read_rev is None:
        put["ConditionExpression"] = "attribute_not_exists(sk)"
    else:
        put["ConditionExpression"] = "rev = :rev"
        put["ExpressionAttributeValues"] = {":rev": n(read_rev)}
    return put


class StoredJob(NamedTuple):
    """A job's stored record (None: none stored), its revision and its record blob."""

    record: Optional[JobRecord]
    rev: Optional[int]
    blob_key: Optional[str]


class DynamoJobs:
    """The job tracker role (:class:`~statestore.roles.JobTracker`) over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext`: job records, their heartbeats
    and their bounded listings (:mod:`statestore.dynamodb.job_index`)."""

    def __init__(self, context: DynamoContext) -> None:
        self.context = context

    def record_put(self, record: JobRecord, read_rev: Optional[int], encoded: EncodedJob) -> dict[str, Any]:
        """The TransactWriteItems item saving ``record`` (``encoded``), refused unless the
        stored revision is still ``read_rev`` (None: no record stored)."""
        return {"Put": job_put(self.context.dynamo.table("items"), record, read_rev, encoded)}

    def job_of(self, what: str, item: dict[str, Any]) -> StoredJob:
        """The stored job of ``item``, reading the item again while the blob it names
        was replaced meanwhile."""
        for _ in range(_REREADS):
            try:
                return StoredJob(job_from_item(item, self.context.blobs), get_n(item, "rev"), record_blob(item))
            except StateStoreUnavailableError:
                again = self.context.dynamo.get(what, "items", {"table_id": item["table_id"], "sk": item["sk"]})
                if again is None:
                    return StoredJob(None, None, None)
                if record_blob(again) == record_blob(item):
                    raise
                item = again
        return StoredJob(job_from_item(item, self.context.blobs), get_n(item, "rev"), record_blob(item))

    def read_job(self, table_id: str, job_id: str) -> StoredJob:
        """The stored record of a job, its revision and its blob (all None: none stored)."""
        what = f"read job {job_id} of table {table_id}"
        item = self.context.dynamo.get(what, "items", job_key(table_id, job_id))
        if item is None:
            return StoredJob(None, None, None)
        return self.job_of(what, item)

    def drop_unsaved_blob(self, job: JobRecord, key: str, what: str) -> None:
        """After a commit with ``job`` found applied before: delete the spilled record
        ``key`` unless the stored record is it (the earlier try was this call's, whose
        reply was lost). Best effort: a leftover wastes space, nothing else."""
        try:
            if self.read_job(job.table_id, job.job_id).blob_key != key:
                delete_quietly(self.context.blobs, [key], what)
        except StateStoreUnavailableError as e:
            log.warning("%s: spilled job record %s not checked: %s", what, key, e)

    def put_job(self, record: JobRecord) -> None:
        self.context.require_table_id(record.table_id)
        d = self.context.dynamo
        what = f"save job {record.job_id}"
        encoded: Optional[EncodedJob] = None
        with cleanup_on_refusal(self.context.blobs, [None], what) as owned:
            for attempt in range(self.context.backoff.max_attempts):
                stored = self.read_job(record.table_id, record.job_id)
                if stored.record is not None and not saves_over(stored.record, record):
                    if encoded is not None and encoded.blob_key and stored.blob_key != encoded.blob_key:
                        delete_quietly(self.context.blobs, [encoded.blob_key], what)  # not saved: never named
                    return
                if encoded is None:
                    beat = stored.record.heartbeat_ms if stored.record is not None else None
                    encoded = encode_job(self.context.blobs, record if beat is None else record.beating(beat))
                    owned.append(encoded.blob_key)
                if stored.blob_key is not None and stored.blob_key == encoded.blob_key:
                    return  # a try of ours whose reply was lost
                put = job_put(d.table("items"), record, stored.rev, encoded)
                index = index_puts(d.table("items"), stored.record, record)  # statestore.dynamodb.job_index
                try:
                    if index:
                        d.call(what, d.client.transact_write_items, TransactItems=[{"Put": put}, *index])
                    else:
                        d.call(what, d.client.put_item, **put)
                except Exception as e:
                    if not is_condition_failed(e) and cancellation_codes(e)[:1] != ["ConditionalCheckFailed"]:
                        raise
                    self.context.backoff.pause(attempt)
                    continue
                if stored.blob_key:
                    delete_quietly(self.context.blobs, [stored.blob_key], what)  # the replaced revision's record
                return
            raise CommitConflictError(f"job {record.job_id} of table {record.table_id}: saves kept racing")

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        """See :meth:`StateStore.heartbeat_jobs`: one conditional UpdateItem per job of
        the ``heartbeat_ms`` attribute beside the record (a job item only; never back)."""
        self.context.require_table_id(table_id)
        d = self.context.dynamo
        beaten = 0
        for job_id in dict.fromkeys(job_ids):
            try:
                d.call(f"refresh job {job_id} of table {table_id}", d.client.update_item, TableName=d.table("items"),
                       Key=job_key(table_id, job_id), UpdateExpression="SET heartbeat_ms = :t",
                       ConditionExpression="attribute_exists(sk) AND (attribute_not_exists(heartbeat_ms) "
                                           "OR heartbeat_ms < :t)",
                       ExpressionAttributeValues={":t": n(at_ms)})
                beaten += 1
            except Exception as e:
                if not is_condition_failed(e):
                    raise
                beaten += self.read_job(table_id, job_id).record is not None  # beaten later already, or no record
        return beaten

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        return self.read_job(table_id, job_id).record

    def _all_jobs(self, table_id: str) -> list[JobRecord]:
        """Every job record of the table (indexing a table of an earlier version, once)."""
        what = f"read every job of table {table_id}"
        jobs = (self.job_of(what, it).record for it in self.context.dynamo.query(
            what, "items", "table_id = :t AND begins_with(sk, :j)", {":t": s(table_id), ":j": s("j#")}))
        return [j for j in jobs if j is not None]

    def _job_records(self, table_id: str, job_ids: list[str]) -> dict[str, JobRecord]:
        """The stored records of ``job_ids`` (missing ones left out), read consistently."""
        d = self.context.dynamo
        table = d.table("items")
        out: dict[str, JobRecord] = {}
        keys = [job_key(table_id, j) for j in dict.fromkeys(job_ids)]
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {table: {"Keys": keys[i:i + 100], "ConsistentRead": True}}
            for attempt in range(10):
                got = d.call(f"read jobs of table {table_id}", d.client.batch_get_item, RequestItems=request)
                for item in got.get("Responses", {}).get(table, []):
                    rec = self.job_of(f"read jobs of table {table_id}", item).record
                    if rec is not None:
                        out[rec.job_id] = rec
                request = got.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2 ** attempt)
        return out

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None,
                  limit: Optional[int] = 1000) -> list[JobRecord]:
        """See :meth:`StateStore.list_jobs`: reads the newest entries of the job index and
        only their records (:mod:`statestore.dynamodb.job_index`). A table not in the
        catalog (deleted) has none."""
        try:
            self.context.require_table_id(table_id)
        except TableNotFoundError:
            return []
        jobs = self.newest_jobs(table_id, kind, limit)
        jobs.sort(key=lambda j: (j.created_ms, j.job_id), reverse=True)
        return jobs

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        """See :meth:`StateStore.in_flight_outputs`: reads only the jobs not yet final
        (:mod:`statestore.dynamodb.job_index`), not every job ever run."""
        return {o for j in self.open_jobs(table_id) if j.last_update_ms >= active_since_ms for o in j.outputs}

    def open_jobs(self, table_id: str) -> list[JobRecord]:
        """The table's jobs not yet final, reading only their records (see
        :meth:`statestore.store.StateStore.open_jobs`)."""
        self.context.require_table_id(table_id)
        d = self.context.dynamo
        ensure_indexed(d, table_id, self._all_jobs)
        entries = open_entries(d, table_id)
        records = self._job_records(table_id, list(entries))
        out = []
        for job_id, token in entries.items():
            rec = records.get(job_id)
            if rec is not None and not rec.final:
                out.append(rec)
                continue
            drop_open_entry(d, table_id, job_id, token)  # final (or gone)
        return out

    def newest_jobs(self, table_id: str, kind: Optional[str], limit: Optional[int]) -> list[JobRecord]:
        """At most ``limit`` (None: all) of the table's jobs (of ``kind``, if given),
        newest created first, reading the index a page at a time and only the records
        it returns."""
        d = self.context.dynamo
        ensure_indexed(d, table_id, self._all_jobs)
        out: list[JobRecord] = []
        for ids in time_pages(d, table_id, PAGE if limit is None else max(10, min(limit, PAGE))):
            records = self._job_records(table_id, ids)
            out.extend(r for r in (records.get(i) for i in ids) if r is not None and (kind is None or r.kind == kind))
            if limit is not None and len(out) >= limit:
                break
        return out if limit is None else out[:max(0, limit)]
