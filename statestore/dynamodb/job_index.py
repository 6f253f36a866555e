"""Bounded reads of a table's job records in DynamoDB: two index item kinds beside the
``j#<job id>`` records in the table's partition of the ``items`` table, so that neither
listing the newest jobs nor the orphan sweep reads every job record ever written.

* ``t#<created ms, 13 digits>#<job id>``: written once, with the job's first save;
  :func:`time_pages` reads them newest first, a page at a time, and the
  records of only the jobs it returns.
* ``o#<job id>``: the job may not be final. Written in the same TransactWriteItems as
  a save that opens the job (its first save, or a new attempt of a failed job), so every
  job not yet final has one. :func:`open_entries` reads only these (the job tracker,
  :class:`~statestore.dynamodb.jobs.DynamoJobs`, then reads the records they name); an
  entry whose job turned out final is deleted then (:func:`drop_open_entry`,
  conditional on its ``token``, so an entry rewritten by a concurrent reopening stays).

Tables whose jobs were saved before these items existed are indexed once, on first
use (``j!indexed`` marks it done, :func:`ensure_indexed`): every record is read then,
and never again. The functions here read and write index items only, over the store's
:class:`~statestore.dynamodb.connection.Dynamo` client; the records are the tracker's.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Callable, Iterator, Optional

from statestore.dynamodb.connection import Dynamo, get_s, is_condition_failed, s
from statestore.jobs import JobRecord

OPEN, BY_TIME, MARKER = "o#", "t#", "j!indexed"

#: the most index entries read a page (a query returns at most 1 MB)
PAGE = 1000


def _open_item(table_id: str, job_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"{OPEN}{job_id}")}


def _time_item(table_id: str, record: JobRecord) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"{BY_TIME}{record.created_ms:013d}#{record.job_id}")}


def index_puts(table: str, stored: Optional[JobRecord], record: JobRecord) -> list[dict[str, Any]]:
    """The TransactWriteItems items that keep the index right when ``record`` replaces
    ``stored`` (None: the job's first save)."""
    out: list[dict[str, Any]] = []
    if stored is None:
        out.append({"Put": {"TableName": table, "Item": _time_item(record.table_id, record)}})
    if not record.final and (stored is None or stored.final):
        out.append({"Put": {"TableName": table, "Item": {**_open_item(record.table_id, record.job_id),
                                                          "token": s(uuid.uuid4().hex)}}})
    return out


def ensure_indexed(d: Dynamo, table_id: str, all_jobs: Callable[[str], list[JobRecord]]) -> None:
    """Index the table's jobs saved before the index existed (``all_jobs``: every
    record of a table), once."""
    if d.get(f"read the job index marker of table {table_id}", "items",
             {"table_id": s(table_id), "sk": s(MARKER)}) is not None:
        return
    puts = []
    for rec in all_jobs(table_id):
        puts.append(_time_item(table_id, rec))
        if not rec.final:
            puts.append({**_open_item(table_id, rec.job_id), "token": s(uuid.uuid4().hex)})
    table = d.table("items")
    for i in range(0, len(puts), 25):
        request: dict[str, Any] = {table: [{"PutRequest": {"Item": p}} for p in puts[i:i + 25]]}
        for attempt in range(10):
            out = d.call(f"index the jobs of table {table_id}", d.client.batch_write_item, RequestItems=request)
            request = out.get("UnprocessedItems") or {}
            if not request:
                break
            time.sleep(0.05 * 2 ** attempt)
    d.call(f"mark the jobs of table {table_id} indexed", d.client.put_item, TableName=table,
           Item={"table_id": s(table_id), "sk": s(MARKER)})


def open_entries(d: Dynamo, table_id: str) -> dict[str, str]:
    """The table's open entries: job id -> the entry's token."""
    return {str(get_s(it, "sk"))[len(OPEN):]: get_s(it, "token") or "" for it in d.query(
        f"list the open jobs of table {table_id}", "items", "table_id = :t AND begins_with(sk, :o)",
        {":t": s(table_id), ":o": s(OPEN)})}


def drop_open_entry(d: Dynamo, table_id: str, job_id: str, token: str) -> None:
    """Delete the open entry of a job found final (or gone), unless a reopening
    rewrote it meanwhile (its token is no longer ``token``)."""
    try:
        d.call(f"drop the open entry of job {job_id}", d.client.delete_item, TableName=d.table("items"),
               Key=_open_item(table_id, job_id), ConditionExpression="#k = :k",
               ExpressionAttributeNames={"#k": "token"}, ExpressionAttributeValues={":k": s(token)})
    except Exception as e:
        if not is_condition_failed(e):
            raise


def time_pages(d: Dynamo, table_id: str, page: int) -> Iterator[list[str]]:
    """The job ids of the time index, newest created first, ``page`` at a time."""
    kwargs: dict[str, Any] = {"TableName": d.table("items"), "ConsistentRead": True, "ScanIndexForward": False,
                              "KeyConditionExpression": "table_id = :t AND begins_with(sk, :p)",
                              "ExpressionAttributeValues": {":t": s(table_id), ":p": s(BY_TIME)}, "Limit": page}
    while True:
        got = d.call(f"list the jobs of table {table_id}", d.client.query, **kwargs)
        yield [str(get_s(it, "sk")).split("#", 2)[2] for it in got.get("Items", [])]
        if not got.get("LastEvaluatedKey"):
            return
        kwargs["ExclusiveStartKey"] = got["LastEvaluatedKey"]
