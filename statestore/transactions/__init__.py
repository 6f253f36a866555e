"""State changes as data: frozen, serialisable transactions.

Each transaction validates against a :class:`TableState` (raising a
:class:`TransactionError` subclass and changing nothing when invalid) and applies to
it. Every backend gives the same semantics:

* the in-memory backend validates and applies to its state under a lock;
* the PostgreSQL backend loads only the rows named by :meth:`Transaction.touches`
  into a fragment, validates and applies there, and writes the difference, inside
  one serializable database transaction; so a commit costs O(size of the change).

Transactions serialise to JSON-friendly dicts tagged with ``type``
(:func:`transaction_to_dict`, :func:`transaction_from_dict`), through
:mod:`statestore.codec` like every record of the store.
"""

from __future__ import annotations

from typing import Any

from statestore.codec import decode, encode
from statestore.errors import TransactionError
from statestore.transactions.base import Touches, Transaction, now_ms
from statestore.transactions.deletes import DeleteRecords, DropTombstones
from statestore.transactions.files import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    DropFileReferences,
    JobAssignment,
    ReplaceFileReferences,
    SplitFileReference,
    SplitFileReferences,
)
from statestore.transactions.partitions import InitialisePartitions, SplitPartition

__all__ = [
    "TRANSACTION_TYPES", "AddFiles", "AssignJobIds", "ClearFiles", "DeleteFiles",
    "DeleteRecords", "DropFileReferences", "DropTombstones", "InitialisePartitions",
    "JobAssignment", "ReplaceFileReferences", "SplitFileReference", "SplitFileReferences", "SplitPartition",
    "Touches", "Transaction", "now_ms", "transaction_from_dict", "transaction_to_dict",
]


TRANSACTION_TYPES: dict[str, Any] = {
    t.TYPE: t for t in (InitialisePartitions, SplitPartition, AddFiles, SplitFileReferences,
                        AssignJobIds, ReplaceFileReferences, DeleteFiles, ClearFiles, DeleteRecords,
                        DropTombstones, DropFileReferences)
}


def transaction_to_dict(txn: Transaction) -> dict[str, Any]:
    out: dict[str, Any] = encode(txn)
    return out


def transaction_from_dict(d: dict[str, Any]) -> Transaction:
    """The transaction ``d`` describes, its class found by its ``type`` tag."""
    try:
        cls = TRANSACTION_TYPES[d["type"]]
    except KeyError as e:
        raise TransactionError(f"unknown transaction type {d.get('type')!r}") from e
    out: Transaction = decode(cls, d)
    return out
