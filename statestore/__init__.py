"""Table metadata for Sleeper: schemas, partitions, file references, transactions,
the table catalog and the StateStore backends. Imports nothing else of ours."""

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
