"""Table metadata for Sleeper: schemas, partitions, file references, transactions,
the table catalog and the StateStore backends. Imports nothing else of ours.

The names below are imported on first use (PEP 562), so a process that needs only a
few modules (a command's key lookup) does not pay for the rest."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statestore.catalog import TableInfo
    from statestore.changes import TableChanges
    from statestore.deletes import Tombstone
    from statestore.errors import (
        CommitConflictError,
        FileReferenceError,
        LeaseHeldError,
        PartitionError,
        PropertyError,
        SchemaError,
        SleeperError,
        StateStoreUnavailableError,
        TableExistsError,
        TableNotFoundError,
        TransactionError,
    )
    from statestore.files import FileRecord, FileReference, FileStatus
    from statestore.jobs import JobRecord
    from statestore.leases import Lease
    from statestore.memory import InMemoryStateStore
    from statestore.partitions import Partition, PartitionTree, partitions_from_split_points
    from statestore.region import Range, Region
    from statestore.schema import Field, ListType, MapType, Schema
    from statestore.state import TableState
    from statestore.store import StateStore
    from statestore.transactions import (
        AddFiles,
        AssignJobIds,
        ClearFiles,
        DeleteFiles,
        DeleteRecords,
        DropFileReferences,
        DropTombstones,
        InitialisePartitions,
        JobAssignment,
        ReplaceFileReferences,
        SplitFileReference,
        SplitFileReferences,
        SplitPartition,
        Transaction,
        transaction_from_dict,
    )

#: where each exported name lives
_HOMES = {
    "TableInfo": "statestore.catalog",
    "TableChanges": "statestore.changes",
    "Tombstone": "statestore.deletes",
    "CommitConflictError": "statestore.errors",
    "FileReferenceError": "statestore.errors",
    "LeaseHeldError": "statestore.errors",
    "PartitionError": "statestore.errors",
    "PropertyError": "statestore.errors",
    "SchemaError": "statestore.errors",
    "SleeperError": "statestore.errors",
    "StateStoreUnavailableError": "statestore.errors",
    "TableExistsError": "statestore.errors",
    "TableNotFoundError": "statestore.errors",
    "TransactionError": "statestore.errors",
    "FileRecord": "statestore.files",
    "FileReference": "statestore.files",
    "FileStatus": "statestore.files",
    "JobRecord": "statestore.jobs",
    "Lease": "statestore.leases",
    "InMemoryStateStore": "statestore.memory",
    "Partition": "statestore.partitions",
    "PartitionTree": "statestore.partitions",
    "partitions_from_split_points": "statestore.partitions",
    "Range": "statestore.region",
    "Region": "statestore.region",
    "Field": "statestore.schema",
    "ListType": "statestore.schema",
    "MapType": "statestore.schema",
    "Schema": "statestore.schema",
    "TableState": "statestore.state",
    "StateStore": "statestore.store",
    "AddFiles": "statestore.transactions",
    "AssignJobIds": "statestore.transactions",
    "ClearFiles": "statestore.transactions",
    "DeleteFiles": "statestore.transactions",
    "DeleteRecords": "statestore.transactions",
    "DropFileReferences": "statestore.transactions",
    "DropTombstones": "statestore.transactions",
    "InitialisePartitions": "statestore.transactions",
    "JobAssignment": "statestore.transactions",
    "ReplaceFileReferences": "statestore.transactions",
    "SplitFileReference": "statestore.transactions",
    "SplitFileReferences": "statestore.transactions",
    "SplitPartition": "statestore.transactions",
    "Transaction": "statestore.transactions",
    "transaction_from_dict": "statestore.transactions",
}

__all__ = [
    "AddFiles", "AssignJobIds", "ClearFiles", "CommitConflictError", "DeleteFiles",
    "DeleteRecords", "DropFileReferences", "DropTombstones", "Tombstone", "Field", "FileRecord",
    "FileReference", "FileReferenceError", "FileStatus", "InMemoryStateStore", "InitialisePartitions",
    "JobAssignment", "JobRecord", "Lease", "LeaseHeldError", "ListType", "MapType", "Partition", "PartitionError",
    "PartitionTree",
    "PropertyError", "Range", "Region", "ReplaceFileReferences", "Schema", "SchemaError", "SleeperError",
    "SplitFileReference", "SplitFileReferences", "SplitPartition", "StateStore", "StateStoreUnavailableError",
    "TableChanges", "TableExistsError", "TableInfo", "TableNotFoundError", "TableState", "Transaction",
    "TransactionError",
    "partitions_from_split_points", "transaction_from_dict",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'statestore' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
