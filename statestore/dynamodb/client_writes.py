"""Idempotency keys of client writes in DynamoDB (:mod:`statestore.client_writes`):
the one place every keyed writer records and reads back its key.

A key is the item ``w#<key>`` in the table's partition of the ``items`` table, holding
the digest, the answer (``seq``, ``answer``) and ``written_ms``. A keyed write adds
:func:`key_put` (conditional on the item not existing) to the TransactWriteItems that
stores the write, so the key and the write are stored together or not at all. When
that condition fails, the writer reads the item back (:meth:`DynamoClientWrites.earlier_write`):
it is the first write of the key, or this very write's own attempt whose reply was
lost and which botocore retried (the item then names this write's sequence number).

:class:`DynamoClientWrites` is the store's client writes role: the other roles that
store a keyed write (the ingest queue, the write buffer, table commits) hold it and take
the key's item from :meth:`DynamoClientWrites.key_put` into their own transaction.
"""

from __future__ import annotations

from typing import Any, Optional

from statestore.client_writes import ClientWrite, ClientWriteRecord
from statestore.clock import now_ms
from statestore.dynamodb.connection import cancellation_codes, get_n, get_s, n, s
from statestore.dynamodb.context import DynamoContext

PREFIX = "w#"


def key_item(table_id: str, request_id: str) -> dict[str, Any]:
    return {"table_id": s(table_id), "sk": s(f"{PREFIX}{request_id}")}


def key_put(table: str, table_id: str, write: ClientWrite, seq: int, written_ms: int) -> dict[str, Any]:
    """The TransactWriteItems item recording ``write``'s key, refused when the key is
    already held."""
    item = {**key_item(table_id, write.request_id), "digest": s(write.digest), "seq": n(seq),
            "written_ms": n(written_ms)}
    if write.answer:
        item["answer"] = s(write.answer)
    return {"Put": {"TableName": table, "Item": item, "ConditionExpression": "attribute_not_exists(sk)"}}


def key_record(item: dict[str, Any]) -> ClientWriteRecord:
    """The record a key item holds."""
    return _record(item)


def _record(item: dict[str, Any]) -> ClientWriteRecord:
    return ClientWriteRecord(str(get_s(item, "sk"))[len(PREFIX):], get_s(item, "digest") or "",
                             get_n(item, "seq") or 0, get_s(item, "answer") or "", get_n(item, "written_ms") or 0)


class DynamoClientWrites:
    """The client writes role (:class:`~statestore.roles.ClientWrites`) over the store's
    one :class:`~statestore.dynamodb.context.DynamoContext`: reading, claiming and pruning
    keys, and the key item a keyed write of another role carries (:meth:`key_put`)."""

    def __init__(self, context: DynamoContext) -> None:
        self.context = context

    def key_put(self, table_id: str, write: ClientWrite, seq: int, written_ms: int) -> dict[str, Any]:
        """The TransactWriteItems item recording ``write``'s key with the answer ``seq``,
        refused (its condition fails) when the key is already held."""
        return key_put(self.context.dynamo.table("items"), table_id, write, seq, written_ms)

    def client_write(self, table_id: str, request_id: str) -> Optional[ClientWriteRecord]:
        item = self.context.dynamo.get(f"read idempotency key {request_id!r} of table {table_id}", "items",
                                key_item(table_id, request_id))
        if item is None:
            self.context.require_table_id(table_id)
        return None if item is None else _record(item)

    def earlier_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        """The stored record of ``write``'s key, checked against its digest (raises
        :class:`~statestore.client_writes.IdempotencyKeyReusedError` for another
        request); None when the key is not held."""
        earlier = self.client_write(table_id, write.request_id)
        return None if earlier is None else earlier.answer_for(table_id, write)

    def write_with_key(self, table_id: str, write: ClientWrite, items: list[dict[str, Any]],
                       what: str) -> Optional[ClientWriteRecord]:
        """Store ``items`` and ``write``'s key (answer 0, the first item) in one
        TransactWriteItems: None when stored; the key's record when it is held already
        (by the first write of the key, or by this write's own try whose reply was lost),
        and then nothing of ``items`` is stored. Any other refusal is raised as DynamoDB
        gave it (its cancellation codes name ``items`` from the second on)."""
        earlier = self.earlier_write(table_id, write)
        if earlier is not None:
            return earlier
        d = self.context.dynamo
        try:
            d.call(what, d.client.transact_write_items, TransactItems=[self.key_put(table_id, write, 0, now_ms()),
                                                                      *items])
        except Exception as e:
            codes = cancellation_codes(e)
            if codes and codes[0] == "ConditionalCheckFailed":
                earlier = self.earlier_write(table_id, write)
                if earlier is not None:
                    return earlier
            raise
        return None

    def claim_client_write(self, table_id: str, write: ClientWrite) -> Optional[ClientWriteRecord]:
        """See :meth:`StateStore.claim_client_write`: the key stored alone (as a keyed
        ingest request of no files)."""
        self.context.require_table_id(table_id)
        return self.write_with_key(table_id, write, [], f"queue ingest requests of table {table_id}")

    def prune_client_writes(self, table_id: str, before_ms: int) -> int:
        self.context.require_table_id(table_id)
        d = self.context.dynamo
        old = [key_item(table_id, str(get_s(it, "sk"))[len(PREFIX):]) for it in d.query(
            f"list idempotency keys of table {table_id}", "items", "table_id = :t AND begins_with(sk, :w)",
            {":t": s(table_id), ":w": s(PREFIX)}, projection="sk, written_ms")
            if (get_n(it, "written_ms") or 0) < before_ms]
        if old:
            d.batch_delete(f"forget old idempotency keys of table {table_id}", "items", old)
        return len(old)
