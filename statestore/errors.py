"""Errors raised by the state store, rooted at :class:`SleeperError`.

Every error carries a message built from domain values (table, partition, file)
and pickles cleanly, because errors cross Spark and Airflow process boundaries.
"""

from __future__ import annotations


class SleeperError(Exception):
    """Root of every error the product raises on purpose."""

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # keep pickling simple for subclasses with one message
        return (self.__class__, self.args)


class SchemaError(SleeperError):
    """A schema, or a value checked against a schema, is invalid."""


class PropertyError(SleeperError):
    """A table property name is unknown or its value has the wrong type."""


class TableNotFoundError(SleeperError):
    """No table of that name (or id) is in the catalog."""


class TableNameError(SleeperError):
    """A table name cannot become Airflow DAG ids and asset URIs."""


class TableExistsError(SleeperError):
    """A table of that name is already in the catalog."""


class TransactionError(SleeperError):
    """A transaction is invalid against the current state; nothing was applied."""


class PartitionError(TransactionError):
    """A partition is missing, not a leaf, or already split."""


class FileReferenceError(TransactionError):
    """A file or file reference is missing, duplicated or assigned elsewhere."""


class BookkeepingError(TransactionError):
    """A commit's bookkeeping does not hold (its job attempt was superseded, or its
    ingest requests are no longer assigned to its job); nothing was applied."""


class TransactionTooLargeError(TransactionError):
    """A commit's items would exceed a limit of the backend (DynamoDB: 400 KB an item,
    counting every attribute): refused before anything was written."""


class CommitConflictError(SleeperError):
    """A commit kept conflicting with concurrent commits and gave up retrying."""


class StateStoreUnavailableError(SleeperError):
    """The state store backend could not be reached or started."""


class LeaseHeldError(SleeperError):
    """An exclusive lease is held by another holder."""


class CommitOutcomeUnknownError(StateStoreUnavailableError):
    """The state store was lost while a commit was in flight and did not come back in
    time to say whether the commit applied. The writer must keep its output (the orphan
    sweep removes it if the commit did not apply); retrying with the same commit id
    applies it at most once."""


class BufferFullError(SleeperError):
    """A write was refused because the table's write buffer holds as many records as
    ``sleeper.table.write.buffer.max.records`` allows: nothing of it was stored. A flush
    (``sleeper flush TABLE``) makes room; the write may then be sent again."""


class NotSupportedError(SleeperError):
    """The state store backend does not implement this operation."""
