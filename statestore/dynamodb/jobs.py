"""Job status records in DynamoDB: one item ``j#<job id>`` per job in the table's
partition of the ``items`` table, holding the record (JSON) and a revision, indexed by
creation time and by being open (:mod:`statestore.dynamodb.job_index`), so listings and
the orphan sweep read bounded pages.

A save reads the stored record, applies :func:`statestore.jobs.saves_over` (a
committed record is final; a superseded attempt cannot overwrite its successor) and
writes conditionally on the revision it read, retrying when another save came first:
the rule holds however saves race. A commit saving its job's record writes the item
in the same TransactWriteItems as the log item (:mod:`statestore.dynamodb.commits`).
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional, Sequence

from statestore.dynamodb.connection import cancellation_codes, get_n, get_s, is_condition_failed, n, s
from statestore.dynamodb.job_index import JobIndexMixin, index_puts
from statestore.errors import CommitConflictError, TableNotFoundError
from statestore.jobs import JobRecord, saves_over


def job_key(table_id: str, job_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"j#{job_id}")}


def job_from_item(item: dict[str, Any]) -> JobRecord:
    """The record of a job item, with the heartbeat that :meth:`JobsMixin.heartbeat_jobs`
    keeps beside the JSON (an attribute of its own, so a beat rewrites no record)."""
    record = JobRecord.from_dict(json.loads(get_s(item, "record") or "{}"))
    beat = get_n(item, "heartbeat_ms")
    return record if beat is None else record.beating(beat)


def job_put(table: str, record: JobRecord, read_rev: Optional[int]) -> dict[str, Any]:
    """A Put of ``record`` conditional on the stored revision still being ``read_rev``
    (None: no record stored)."""
    put: dict[str, Any] = {"TableName": table, "Item": {
        **job_key(record.table_id, record.job_id), "record": s(json.dumps(record.to_dict())),
        "rev": n((read_rev or 0) + 1)}}
    if read_rev is None:
        put["ConditionExpression"] = "attribute_not_exists(sk)"
    else:
        put["ConditionExpression"] = "rev = :rev"
        put["ExpressionAttributeValues"] = {":rev": n(read_rev)}
    return put


class JobsMixin(JobIndexMixin):
    """The job records part of :class:`~statestore.dynamodb.store.DynamoDBStateStore`."""

    def _read_job(self, table_id: str, job_id: str) -> tuple[Optional[JobRecord], Optional[int]]:
        """The stored record of a job and its revision (None, None: none stored)."""
        item = self._dynamo.get(f"read job {job_id} of table {table_id}", "items", job_key(table_id, job_id))
        if item is None:
            return None, None
        return job_from_item(item), get_n(item, "rev")

    def put_job(self, record: JobRecord) -> None:
        self._require_table_id(record.table_id)
        d = self._dynamo
        for attempt in range(self._backoff.max_attempts):
            stored, rev = self._read_job(record.table_id, record.job_id)
            if stored is not None and not saves_over(stored, record):
                return
            saved = record if stored is None or stored.heartbeat_ms is None else record.beating(stored.heartbeat_ms)
            put = job_put(d.table("items"), saved, rev)
            index = index_puts(d.table("items"), stored, record)  # statestore.dynamodb.job_index
            try:
                if index:
                    d.call(f"save job {record.job_id}", d.client.transact_write_items,
                           TransactItems=[{"Put": put}, *index])
                else:
                    d.call(f"save job {record.job_id}", d.client.put_item, **put)
                return
            except Exception as e:
                if not is_condition_failed(e) and cancellation_codes(e)[:1] != ["ConditionalCheckFailed"]:
                    raise
                self._backoff.pause(attempt)
        raise CommitConflictError(f"job {record.job_id} of table {record.table_id}: saves kept racing")

    def heartbeat_jobs(self, table_id: str, job_ids: Sequence[str], at_ms: int) -> int:
        """See :meth:`StateStore.heartbeat_jobs`: one conditional UpdateItem per job of
        the ``heartbeat_ms`` attribute beside the record (a job item only; never back)."""
        self._require_table_id(table_id)
        d = self._dynamo
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
                beaten += self._read_job(table_id, job_id)[0] is not None  # beaten later already, or no record
        return beaten

    def get_job(self, table_id: str, job_id: str) -> Optional[JobRecord]:
        return self._read_job(table_id, job_id)[0]

    def _all_jobs(self, table_id: str) -> list[JobRecord]:
        """Every job record of the table (indexing a table of an earlier version, once)."""
        return [job_from_item(it) for it in self._dynamo.query(
            f"read every job of table {table_id}", "items", "table_id = :t AND begins_with(sk, :j)",
            {":t": s(table_id), ":j": s("j#")})]

    def _job_records(self, table_id: str, job_ids: list[str]) -> dict[str, JobRecord]:
        """The stored records of ``job_ids`` (missing ones left out), read consistently."""
        d = self._dynamo
        table = d.table("items")
        out: dict[str, JobRecord] = {}
        keys = [job_key(table_id, j) for j in dict.fromkeys(job_ids)]
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {table: {"Keys": keys[i:i + 100], "ConsistentRead": True}}
            for attempt in range(10):
                got = d.call(f"read jobs of table {table_id}", d.client.batch_get_item, RequestItems=request)
                for item in got.get("Responses", {}).get(table, []):
                    rec = job_from_item(item)
                    out[rec.job_id] = rec
                request = got.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2 ** attempt)
        return out

    def list_jobs(self, table_id: str, *, kind: Optional[str] = None, limit: int = 1000) -> list[JobRecord]:
        """See :meth:`StateStore.list_jobs`: reads the newest entries of the job index and
        only their records (:mod:`statestore.dynamodb.job_index`). A table not in the
        catalog (deleted) has none."""
        try:
            self._require_table_id(table_id)
        except TableNotFoundError:
            return []
        jobs = self.newest_jobs(table_id, kind, limit)
        jobs.sort(key=lambda j: (j.created_ms, j.job_id), reverse=True)
        return jobs

    def in_flight_outputs(self, table_id: str, active_since_ms: int) -> set[str]:
        """See :meth:`StateStore.in_flight_outputs`: reads only the jobs not yet final
        (:mod:`statestore.dynamodb.job_index`), not every job ever run."""
        self._require_table_id(table_id)
        return {o for j in self.open_jobs(table_id) if j.last_update_ms >= active_since_ms for o in j.outputs}
