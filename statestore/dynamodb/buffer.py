"""The write buffer in DynamoDB (:mod:`statestore.buffer`).

Items of the ``items`` table, under the table's id:

* ``b#<seq>``: one write: ``rows``, ``written_ms``, ``write_id`` (fresh per write: a
  write whose reply was lost finds its own entry by it) and the Arrow IPC bytes in ``data``,
  or, for bytes over :data:`INLINE_LIMIT` (items are at most 400 KB), ``blob_key``: the key
  of an object in the store's blob store holding them;
* ``b!seq``: the table's sequence counter (an atomic ADD per write);
* ``b!head``: ``held`` (records buffered) and ``flushes`` (flushes committed).

A write takes a number from the counter, then puts its entry, adds its records to
``held`` (conditional on the limit: the backpressure check is exact) and checks the
table is in the catalog, in one TransactWriteItems. A number taken by a write that then
failed is never used; numbers are not dense. When that transaction's reply is lost
(botocore's retry is cancelled because the entry exists, or the connection stays
down), the write looks for its own entry and, found, succeeds; its blob is deleted only
after a definite refusal (buffer full, table gone: :mod:`statestore.dynamodb.writes`).
A flush's commit deletes its entries (each conditional on existing) and updates the
head in the same TransactWriteItems as its log entry
(:mod:`statestore.dynamodb.commits`, which takes those items from
:meth:`DynamoWriteBuffer.flush_items`), so one flush commit holds at most
:data:`MAX_FLUSH_ENTRIES` entries (a transaction has at most 100 items).

A read lists the entries between two reads of the head; if ``flushes`` moved, or an
entry's bytes are gone when fetched (its entry gone too: a flush committed it and then
deleted its blob), it reads again, so the list and the count it returns hold at one
instant. A blob that cannot be read while its entry is still buffered is an error.

:class:`DynamoWriteBuffer` is the store's write buffer role, with the record blobs the
proof of erasure reads (:meth:`DynamoWriteBuffer.record_blobs`, see
:mod:`statestore.dynamodb.erasure`).
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Collection, Iterator, Optional, Sequence

from statestore.buffer import BufferEntry, BufferSnapshot, BufferStats, RecordBlob, full_message
from statestore.client_writes import ClientWrite
from statestore.clock import now_ms
from statestore.dynamodb.client_writes import DynamoClientWrites
from statestore.dynamodb.connection import b, cancellation_codes, get_n, get_s, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.writes import cleanup_on_refusal, delete_quietly, outcome_unknown
from statestore.errors import BufferFullError, StateStoreUnavailableError, TableNotFoundError

#: entries whose bytes are larger than this go to the blob store, behind a pointer
INLINE_LIMIT = 350 * 1024
#: the most entries one flush commit removes (TransactWriteItems takes 100 items)
MAX_FLUSH_ENTRIES = 90
HEAD, COUNTER = "b!head", "b!seq"


def entry_key(table_id: str, seq: int) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"b#{seq:020d}")}


def _seq_of(item: dict[str, Any]) -> int:
    return int(str(get_s(item, "sk"))[2:])


class DynamoWriteBuffer:
    """The write buffer role (:class:`~statestore.roles.WriteBuffer`) over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext`; a keyed write stores its key
    through ``client_writes`` in the write's one transaction."""

    buffer_max_flush_entries: Optional[int] = MAX_FLUSH_ENTRIES

    def __init__(self, context: DynamoContext, client_writes: DynamoClientWrites) -> None:
        self.context = context
        self.client_writes = client_writes

    def flush_items(self, table_id: str, seqs: Sequence[int], rows: int) -> list[dict[str, Any]]:
        """The TransactWriteItems items of a flush's commit: the deletion of each entry of
        ``seqs`` (in order, each refused unless the entry is buffered) and the head's
        update taking the flushed ``rows`` off ``held`` and counting the flush."""
        d = self.context.dynamo
        items: list[dict[str, Any]] = [
            {"Delete": {"TableName": d.table("items"), "Key": entry_key(table_id, q),
                        "ConditionExpression": "attribute_exists(sk)"}} for q in sorted(set(seqs))]
        items.append({"Update": {"TableName": d.table("items"), "Key": {"table_id": s(table_id), "sk": s(HEAD)},
                                 "UpdateExpression": "ADD held :r, flushes :one",
                                 "ExpressionAttributeValues": {":r": n(-rows), ":one": n(1)}}})
        return items

    def _head(self, table_id: str) -> tuple[int, int]:
        """(held, flushes) of the table's buffer."""
        item = self.context.dynamo.get(f"read the buffer head of table {table_id}", "items",
                                {"table_id": s(table_id), "sk": s(HEAD)})
        return (0, 0) if item is None else (get_n(item, "held") or 0, get_n(item, "flushes") or 0)

    def append_buffer(self, table_id: str, data: bytes, rows: int, *, max_rows: Optional[int] = None,
                      client_write: Optional[ClientWrite] = None) -> int:
        d = self.context.dynamo
        if client_write is not None:  # a repeat takes no number and stores nothing
            earlier = self.client_writes.client_write(table_id, client_write.request_id)
            if earlier is not None:
                return earlier.answer_for(table_id, client_write).seq
        if max_rows is not None and rows > max_rows:
            raise BufferFullError(full_message(table_id, self._head(table_id)[0], rows, max_rows))
        out = d.call(f"number a write to table {table_id}", d.client.update_item, TableName=d.table("items"),
                     Key={"table_id": s(table_id), "sk": s(COUNTER)}, UpdateExpression="ADD v :one",
                     ExpressionAttributeValues={":one": n(1)}, ReturnValues="UPDATED_NEW")
        seq = int(out["Attributes"]["v"]["N"])
        write_id = uuid.uuid4().hex
        written_ms = now_ms()
        item = {**entry_key(table_id, seq), "rows": n(rows), "written_ms": n(written_ms), "write_id": s(write_id)}
        blob = None
        if len(data) > INLINE_LIMIT:
            blob = f"{table_id}/buffer/{seq}-{write_id}.arrow"
            self.context.blobs.put(blob, data)
            item["blob_key"] = s(blob)
        else:
            item["data"] = b(data)
        head: dict[str, Any] = {"TableName": d.table("items"), "Key": {"table_id": s(table_id), "sk": s(HEAD)},
                                "UpdateExpression": "ADD held :r", "ExpressionAttributeValues": {":r": n(rows)}}
        if max_rows is not None:
            head["ConditionExpression"] = "attribute_not_exists(held) OR held <= :lim"
            head["ExpressionAttributeValues"][":lim"] = n(max_rows - rows)
        items = [{"Put": {"TableName": d.table("items"), "Item": item,
                          "ConditionExpression": "attribute_not_exists(sk)"}},
                 {"Update": head},
                 {"ConditionCheck": {"TableName": d.table("catalog"), "Key": {"pk": s(f"id#{table_id}")},
                                     "ConditionExpression": "attribute_exists(pk)"}}]
        if client_write is not None:  # the key, in the same transaction (statestore.dynamodb.client_writes)
            items.append(self.client_writes.key_put(table_id, client_write, seq, written_ms))
        what = f"write {rows} records to the buffer of table {table_id}"
        with cleanup_on_refusal(self.context.blobs, [blob], what):
            try:
                d.call(what, d.client.transact_write_items, TransactItems=items)
            except Exception as e:
                if self._entry_is_ours(table_id, seq, write_id, e):
                    return seq
                codes = cancellation_codes(e)
                if client_write is not None and codes[3:4] == ["ConditionalCheckFailed"]:
                    earlier = self.client_writes.client_write(table_id, client_write.request_id)
                    if earlier is not None:  # the key's first write: this one was refused whole
                        if blob is not None and earlier.seq != seq:
                            delete_quietly(self.context.blobs, [blob], what)
                        return earlier.answer_for(table_id, client_write).seq
                if len(codes) >= 3 and codes[2] not in ("None", ""):
                    raise TableNotFoundError(f"no table with id {table_id}") from None
                if len(codes) >= 3 and codes[1] not in ("None", "") and max_rows is not None:
                    raise BufferFullError(full_message(table_id, self._head(table_id)[0], rows, max_rows)) from None
                raise
        return seq

    def _entry_is_ours(self, table_id: str, seq: int, write_id: str, e: Exception) -> bool:
        """Whether the write of entry ``seq`` that raised ``e`` applied after all: the
        number is ours alone (taken from the counter), so a cancellation saying the
        entry exists means a try of ours whose reply was lost wrote it; after an
        unknown outcome the entry is read back and its write id compared."""
        codes = cancellation_codes(e)
        if codes[:1] == ["ConditionalCheckFailed"]:
            return True
        if codes or not outcome_unknown(e):
            return False
        stored = self.context.dynamo.get(f"look for write {seq} of table {table_id}", "items", entry_key(table_id, seq))
        return stored is not None and get_s(stored, "write_id") == write_id

    def _listed(self, table_id: str) -> list[dict[str, Any]]:
        return list(self.context.dynamo.query(f"list the write buffer of table {table_id}", "items",
                                       "table_id = :t AND begins_with(sk, :b)", {":t": s(table_id), ":b": s("b#")},
                                       names={"#r": "rows"}, projection="sk, #r, written_ms, blob_key"))

    def entry_items(self, table_id: str, seqs: Sequence[int], projection: str) -> dict[int, dict[str, Any]]:
        """The stored entries of ``seqs`` (missing ones left out), read consistently."""
        d = self.context.dynamo
        out: dict[int, dict[str, Any]] = {}
        table = d.table("items")
        keys = [entry_key(table_id, q) for q in dict.fromkeys(seqs)]
        names = {k: v for k, v in (("#r", "rows"), ("#d", "data")) if k in projection}
        for i in range(0, len(keys), 100):
            request: dict[str, Any] = {table: {"Keys": keys[i:i + 100], "ConsistentRead": True,
                                               "ProjectionExpression": projection,
                                               "ExpressionAttributeNames": names}}
            for attempt in range(10):
                got = d.call(f"read write buffer entries of table {table_id}", d.client.batch_get_item,
                             RequestItems=request)
                for item in got.get("Responses", {}).get(table, []):
                    out[_seq_of(item)] = item
                request = got.get("UnprocessedKeys") or {}
                if not request:
                    break
                time.sleep(0.05 * 2 ** attempt)
        return out

    def buffered_rows(self, table_id: str, seqs: Sequence[int]) -> Optional[tuple[int, list[str]]]:
        """The records of the entries ``seqs`` and their blob keys, or None when any of
        them is no longer buffered."""
        items = self.entry_items(table_id, seqs, "sk, #r, blob_key")
        if len(items) != len(set(seqs)):
            return None
        return (sum(get_n(it, "rows") or 0 for it in items.values()),
                [k for k in (get_s(it, "blob_key") for it in items.values()) if k])

    def read_buffer(self, table_id: str, *, up_to_seq: Optional[int] = None, max_rows: Optional[int] = None,
                    skip_data: Collection[int] = (), max_entries: Optional[int] = None) -> BufferSnapshot:
        while True:
            _, before = self._head(table_id)
            listed = self._listed(table_id)
            if not listed:
                self.context.require_table_id(table_id)
            chosen: list[dict[str, Any]] = []
            taken = 0
            for it in listed:
                if up_to_seq is not None and _seq_of(it) > up_to_seq:
                    break
                if chosen and ((max_rows is not None and taken >= max_rows)
                               or (max_entries is not None and len(chosen) >= max_entries)):
                    break
                chosen.append(it)
                taken += get_n(it, "rows") or 0
            wanted = [_seq_of(it) for it in chosen if _seq_of(it) not in skip_data]
            data: dict[int, bytes] = {}
            if wanted:
                got = self.entry_items(table_id, wanted, "sk, #d, blob_key")
                if len(got) != len(wanted):
                    continue  # a flush took some: read again
                if not self._read_data(table_id, got, data):
                    continue  # a flush took one and deleted its blob meanwhile: read again
            if self._head(table_id)[1] != before:
                continue
            return BufferSnapshot(tuple(BufferEntry(_seq_of(it), get_n(it, "rows") or 0,
                                                    get_n(it, "written_ms") or 0, data.get(_seq_of(it)))
                                        for it in chosen), before)

    def _read_data(self, table_id: str, got: dict[int, dict[str, Any]], data: dict[int, bytes]) -> bool:
        """Put the bytes of the entries ``got`` in ``data``; False when a blob could not
        be read because its entry is gone (a flush committed it, then deleted the blob:
        its records are in a file now). A blob that cannot be read while its entry is
        still buffered is an error."""
        for q, it in got.items():
            key = get_s(it, "blob_key")
            if not key:
                data[q] = bytes(it["data"]["B"])
                continue
            try:
                data[q] = self.context.blobs.get(key)
            except StateStoreUnavailableError:
                if q in self.entry_items(table_id, [q], "sk"):
                    raise
                return False
        return True

    def buffer_stats(self, table_id: str) -> BufferStats:
        _, flushes = self._head(table_id)
        listed = self._listed(table_id)
        if not listed:
            self.context.require_table_id(table_id)
        times = [get_n(it, "written_ms") or 0 for it in listed]
        return BufferStats(len(listed), sum(get_n(it, "rows") or 0 for it in listed), min(times, default=None),
                           flushes)

    def buffer_high_water(self, table_id: str) -> int:
        """See :meth:`StateStore.buffer_high_water`."""
        return max(self.read_buffer(table_id).seqs, default=0)

    def record_blobs(self, table_id: str) -> Iterator[RecordBlob]:
        """Every buffer blob of the table, named by a live entry or not (see
        :mod:`statestore.dynamodb.erasure`)."""
        self.context.require_table_id(table_id)
        prefix = f"{table_id}/buffer/"
        listed = self.context.blobs.list(prefix)
        named = {k for k in (get_s(it, "blob_key") for it in self.context.dynamo.query(
            f"list the write buffer of table {table_id}", "items", "table_id = :t AND begins_with(sk, :b)",
            {":t": s(table_id), ":b": s("b#")}, projection="sk, blob_key")) if k}
        for key, written_ms in listed:
            try:
                data = self.context.blobs.get(key)
            except StateStoreUnavailableError:
                if any(k == key for k, _ in self.context.blobs.list(prefix)):
                    raise  # still there: unreadable, which is not "holds nothing"
                continue  # deleted by its flush meanwhile
            yield RecordBlob(key, written_ms, data, key in named)
