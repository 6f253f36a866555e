"""The transaction log of a table: items ``(table_id, n)`` for n = 1, 2, ..., each one
transaction serialised with ``to_dict`` (JSON, zlib-compressed). A body larger than
:data:`INLINE_LIMIT` compressed goes to the blob store under a fresh key, and the item
holds the key instead. Items are only ever added (conditionally, see
:mod:`statestore.dynamodb.commits`) or, by retention, deleted from the old end.
"""

from __future__ import annotations

import json
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Optional

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.connection import Dynamo, b, get_n, get_s, n, s
from statestore.transactions import Transaction, transaction_from_dict

#: compressed bodies up to this many bytes are kept in the log item (items hold 400 KB)
INLINE_LIMIT = 350_000


@dataclass(frozen=True)
class EncodedTransaction:
    """A transaction ready to be logged: its compressed body inline, or the key of the
    blob holding it (written before the log item, deleted if the commit fails)."""

    type: str
    body: Optional[bytes]
    blob_key: Optional[str]

    @classmethod
    def of(cls, table_id: str, txn: Transaction, blobs: BlobStore) -> EncodedTransaction:
        data = zlib.compress(json.dumps(txn.to_dict(), separators=(",", ":")).encode(), 1)
        if len(data) <= INLINE_LIMIT:
            return cls(txn.TYPE, data, None)
        key = f"transactions/{table_id}/{uuid.uuid4().hex}.json.z"
        blobs.put(key, data)
        return cls(txn.TYPE, None, key)

    def item(self, table_id: str, number: int, commit_id: str, time_ms: int) -> dict[str, Any]:
        out = {"table_id": s(table_id), "n": n(number), "type": s(self.type), "commit_id": s(commit_id),
               "time_ms": n(time_ms)}
        if self.body is not None:
            out["body"] = b(self.body)
        else:
            assert self.blob_key is not None
            out["body_key"] = s(self.blob_key)
        return out


def decode(item: dict[str, Any], blobs: BlobStore) -> Transaction:
    """The transaction of a log item (reading its body from the blob store if need be)."""
    if "body" in item:
        data = item["body"]["B"]
    else:
        key = get_s(item, "body_key")
        assert key is not None
        data = blobs.get(key)
    return transaction_from_dict(json.loads(zlib.decompress(data)))


@dataclass(frozen=True)
class LoggedTransaction:
    n: int
    commit_id: str
    transaction: Transaction


def read_after(dynamo: Dynamo, blobs: BlobStore, table_id: str, after: int) -> list[LoggedTransaction]:
    """The logged transactions numbered above ``after``, in order (a consistent read)."""
    items = dynamo.query(f"read the transaction log of table {table_id}", "log", "table_id = :t AND n > :n",
                         {":t": s(table_id), ":n": n(after)})
    return [LoggedTransaction(get_n(it, "n") or 0, get_s(it, "commit_id") or "", decode(it, blobs)) for it in items]
