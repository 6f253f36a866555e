"""The ingest request queue in DynamoDB, in the table's partition of the ``items``
table: one item ``r#<request id>`` per request (the request as JSON, a revision) and
one write-once item ``e#<job id>`` per ended ingest job (ingested, or requeued with
the error and the attempt limit).

A job ends by writing its ``e#`` item, conditionally on there being none: the
requests still assigned to it take their fate from that one item (a request's
effective state is its item's, passed through :meth:`IngestRequest.finished` when it
says ``assigned`` to an ended job). So ending a job is one atomic write however many
requests it holds, and a data commit marks its requests ingested by writing the same
item in its TransactWriteItems; of a commit and a requeue racing, exactly one writes it.

* adding requests is one TransactWriteItems of conditional puts (all or nothing) per
  100 requests; a larger batch is written 100 at a time and the parts already written
  are removed again if a later part is refused; a batch carrying a client's idempotency
  key records the key in its one TransactWriteItems (:mod:`statestore.dynamodb.client_writes`),
  so it holds at most 99 requests;
* assigning is one TransactWriteItems conditional on each request's revision, so of
  two batchers racing exactly one wins; at most 100 requests per job (DynamoDB's limit
  on one transaction; the batcher's default ``job.max.files`` is 100).

:class:`DynamoIngestQueue` is the store's ingest queue role; a data commit takes the
``e#`` item of its ingest job from :meth:`DynamoIngestQueue.ended_put` and checks the
job's assignment with :meth:`DynamoIngestQueue.assigned_to`.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable, Optional, Sequence

import botocore.exceptions

from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.dynamodb.client_writes import DynamoClientWrites
from statestore.dynamodb.connection import cancellation_codes, get_n, get_s, is_condition_failed, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.writes import may_have_applied
from statestore.ingest_requests import INGEST_REQUEST_STATUSES, IngestRequest, IngestRequestError, check_new_requests

#: the most items in one DynamoDB transaction
MAX_TRANSACTION_ITEMS = 100


def request_key(table_id: str, request_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"r#{request_id}")}


def ended_key(table_id: str, job_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"e#{job_id}")}


def ended_item(table_id: str, job_id: str, ok: bool, error: Optional[str] = None,
               max_attempts: Optional[int] = None, counted: bool = True) -> dict[str, Any]:
    end: dict[str, Any] = {"ok": ok, "error": error, "max_attempts": max_attempts}
    if not counted:  # an end written before this field existed counted its attempt
        end["counted"] = False
    return {**ended_key(table_id, job_id), "end": s(json.dumps(end))}


def _request_item(r: IngestRequest, rev: int) -> dict[str, Any]:
    return {**request_key(r.table_id, r.request_id), "request": s(json.dumps(r.to_dict())), "rev": n(rev)}


def _request(item: dict[str, Any]) -> IngestRequest:
    return IngestRequest.from_dict(json.loads(get_s(item, "request") or "{}"))


def _effective(r: IngestRequest, ends: dict[str, dict[str, Any]]) -> IngestRequest:
    if r.status == "assigned" and r.job_id in ends:
        end = ends[r.job_id]
        return r.finished(end["ok"], end["error"], end["max_attempts"], end.get("counted", True))
    return r


class DynamoIngestQueue:
    """The ingest queue role (:class:`~statestore.roles.IngestQueue`) over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext`; a batch carrying an idempotency
    key stores it through ``client_writes`` in the batch's one transaction."""

    def __init__(self, context: DynamoContext, client_writes: DynamoClientWrites) -> None:
        self.context = context
        self.client_writes = client_writes

    def ended_put(self, table_id: str, job_id: str) -> dict[str, Any]:
        """The TransactWriteItems item a data commit writes to say ingest job ``job_id``
        ended with its requests ingested, refused when the job has ended already."""
        return {"Put": {"TableName": self.context.dynamo.table("items"), "Item": ended_item(table_id, job_id, True),
                        "ConditionExpression": "attribute_not_exists(sk)"}}

    def _batch_get(self, keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
        d = self.context.dynamo
        table = d.table("items")
        out: list[dict[str, Any]] = []
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {table: {"Keys": keys[i:i + 100], "ConsistentRead": True}}
            for attempt in range(10):
                page = d.call("read ingest requests", d.client.batch_get_item, RequestItems=request)
                out.extend(page.get("Responses", {}).get(table, []))
                request = page.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2 ** attempt)
        return out

    def _ends(self, table_id: str, job_ids: set[str]) -> dict[str, dict[str, Any]]:
        """The ended jobs among ``job_ids``: job id -> its end."""
        items = self._batch_get([ended_key(table_id, j) for j in sorted(job_ids)])
        return {(get_s(it, "sk") or "")[2:]: json.loads(get_s(it, "end") or "{}") for it in items}

    def _raw_requests(self, table_id: str, job_id: Optional[str] = None) -> list[tuple[IngestRequest, int]]:
        """The request items of a table (only those saying assigned to ``job_id``, if
        given), with their revisions."""
        items = self.context.dynamo.query(f"read the ingest requests of table {table_id}", "items",
                                   "table_id = :t AND begins_with(sk, :r)", {":t": s(table_id), ":r": s("r#")})
        out = [(_request(it), get_n(it, "rev") or 0) for it in items]
        if job_id is not None:
            out = [(r, v) for r, v in out if r.status == "assigned" and r.job_id == job_id]
        return out

    def assigned_to(self, table_id: str, job_id: str) -> int:
        """How many requests are (effectively) assigned to ``job_id`` now."""
        raw = self._raw_requests(table_id, job_id)
        if not raw or self._ends(table_id, {job_id}):
            return 0
        return len(raw)

    def add_ingest_requests(self, table_id: str, requests: Sequence[IngestRequest], *,
                            client_write: Optional[ClientWrite] = None) -> Optional[ClientWriteRecord]:
        new = check_new_requests(table_id, requests)
        self.context.require_table_id(table_id)
        if client_write is not None:
            return self._add_keyed_requests(table_id, new, client_write)
        d = self.context.dynamo
        table = d.table("items")
        done: list[IngestRequest] = []
        for i in range(0, len(new), MAX_TRANSACTION_ITEMS):
            part = new[i:i + MAX_TRANSACTION_ITEMS]
            items = [{"Put": {"TableName": table, "Item": _request_item(r, 1),
                              "ConditionExpression": "attribute_not_exists(sk)"}} for r in part]
            try:
                d.call(f"queue ingest requests of table {table_id}", d.client.transact_write_items,
                       TransactItems=items)
            except Exception as e:
                codes = cancellation_codes(e)
                if codes and self._stored_as(table_id, part, e, lambda r, mine, rev: r == mine and rev == 1):
                    done.extend(part)  # a try of ours whose reply was lost wrote them
                    continue
                if done:
                    d.batch_delete("undo queued ingest requests", "items",
                                   [request_key(table_id, r.request_id) for r in done])
                taken = [r for r, c in zip(part, codes) if c == "ConditionalCheckFailed"]
                if taken:
                    raise IngestRequestError(f"ingest request {taken[0].request_id} is already queued") from None
                raise
            done.extend(part)
        return None

    def _add_keyed_requests(self, table_id: str, new: Sequence[IngestRequest],
                            write: ClientWrite) -> Optional[ClientWriteRecord]:
        """Queue ``new`` and record ``write``'s key in one TransactWriteItems; a key
        already held (by the first write, or by this write's own attempt whose reply was
        lost) answers with its record."""
        if len(new) >= MAX_TRANSACTION_ITEMS:
            raise IngestRequestError(
                f"at most {MAX_TRANSACTION_ITEMS - 1} files can be queued for table {table_id} in one request "
                f"with an idempotency key on DynamoDB, not {len(new)}: the key and the requests are stored in "
                "one transaction; split the files over several requests")
        table = self.context.dynamo.table("items")
        items = [{"Put": {"TableName": table, "Item": _request_item(r, 1),
                          "ConditionExpression": "attribute_not_exists(sk)"}} for r in new]
        try:
            return self.client_writes.write_with_key(table_id, write, items,
                                                     f"queue ingest requests of table {table_id}")
        except Exception as e:
            taken = [r for r, c in zip(new, cancellation_codes(e)[1:]) if c == "ConditionalCheckFailed"]
            if taken:
                raise IngestRequestError(f"ingest request {taken[0].request_id} is already queued") from None
            raise

    def _stored_as(self, table_id: str, mine: Sequence[IngestRequest], e: BaseException,
                   ours: Callable[[IngestRequest, IngestRequest, Optional[int]], bool]) -> bool:
        """Whether a write of the requests ``mine`` that botocore retried (``e``: the
        retry's cancellation) applied after all: every stored request, with its
        revision, is ``ours(stored, mine, rev)``."""
        if not (isinstance(e, botocore.exceptions.ClientError) and may_have_applied(e)):
            return False
        items = self._batch_get([request_key(table_id, r.request_id) for r in mine])
        stored = {_request(it).request_id: (_request(it), get_n(it, "rev")) for it in items}
        return all(r.request_id in stored and ours(stored[r.request_id][0], r, stored[r.request_id][1])
                   for r in mine)

    def pending_ingest_requests(self, table_id: str, limit: Optional[int] = None) -> list[IngestRequest]:
        return self.list_ingest_requests(table_id, status="pending", limit=limit)

    def assign_ingest_requests(self, table_id: str, job_id: str, request_ids: Sequence[str]) -> bool:
        ids = list(dict.fromkeys(request_ids))
        if len(ids) > MAX_TRANSACTION_ITEMS:
            raise IngestRequestError(f"at most {MAX_TRANSACTION_ITEMS} ingest requests can be assigned to one job "
                                     f"on DynamoDB, not {len(ids)}")
        self.context.require_table_id(table_id)
        if not ids or self._ends(table_id, {job_id}):
            return not ids  # a job that has ended takes no new requests
        d = self.context.dynamo
        for attempt in range(self.context.backoff.max_attempts):
            items = self._batch_get([request_key(table_id, i) for i in ids])
            if len(items) != len(ids):
                return False
            raw = [(_request(it), get_n(it, "rev") or 0) for it in items]
            ends = self._ends(table_id, {r.job_id for r, _ in raw if r.status == "assigned" and r.job_id})
            now = [(_effective(r, ends), v) for r, v in raw]
            if any(r.status != "pending" for r, _ in now):
                return False
            writes = [{"Put": {"TableName": d.table("items"), "Item": _request_item(r.assigned(job_id), v + 1),
                               "ConditionExpression": "rev = :v", "ExpressionAttributeValues": {":v": n(v)}}}
                      for r, v in now]
            try:
                d.call(f"assign ingest requests to job {job_id}", d.client.transact_write_items,
                       TransactItems=writes)
                return True
            except Exception as e:
                codes = cancellation_codes(e)
                if not codes:
                    raise
                if "ConditionalCheckFailed" in codes:
                    # another assignment came first -- or a try of ours whose reply was lost
                    return self._stored_as(table_id, [r for r, _ in now], e, lambda r, mine, rev: (
                        r.status == "assigned" and r.job_id == job_id))
                self.context.backoff.pause(attempt)  # a transaction conflict: look again
        return False

    def finish_ingest_job(self, table_id: str, job_id: str, ok: bool, error: Optional[str] = None, *,
                          max_attempts: Optional[int] = None, counted: bool = True) -> int:
        self.context.require_table_id(table_id)
        count = self.assigned_to(table_id, job_id)
        if not count:
            return 0
        d = self.context.dynamo
        try:
            d.call(f"end ingest job {job_id}", d.client.put_item,
                TableName=d.table("items"), Item=ended_item(table_id, job_id, ok, error, max_attempts, counted),
                ConditionExpression="attribute_not_exists(sk)")
        except Exception as e:
            if is_condition_failed(e):
                return 0  # ended meanwhile (its commit, or another finish)
            raise
        return count

    def list_ingest_requests(self, table_id: str, *, status: Optional[str] = None,
                             limit: Optional[int] = 1000) -> list[IngestRequest]:
        if status is not None and status not in INGEST_REQUEST_STATUSES:
            raise IngestRequestError(f"unknown ingest request status {status!r}")
        self.context.require_table_id(table_id)
        raw = [r for r, _ in self._raw_requests(table_id)]
        ends = self._ends(table_id, {r.job_id for r in raw if r.status == "assigned" and r.job_id})
        out = [e for e in (_effective(r, ends) for r in raw) if status is None or e.status == status]
        out.sort(key=lambda r: (r.received_ms, r.request_id))
        return out if limit is None else out[:max(0, limit)]
