"""Errors of the data plane; all derive from statestore's SleeperError."""

from __future__ import annotations

from statestore.errors import SleeperError, TableNotFoundError


class IngestError(SleeperError):
    """Input could not be ingested (unreadable, or does not fit the schema); nothing was committed."""


class IngestStalledError(IngestError):
    """An ingest waited for compaction longer than its table allows
    (``sleeper.table.ingest.max.files.wait.seconds``); it read and wrote nothing."""


class QueryError(SleeperError):
    """A query is malformed for the table's schema."""


class ConfigError(SleeperError):
    """The Sleeper configuration (sleeper.toml) is invalid."""


class StorageError(SleeperError):
    """The object store refused or failed an operation."""


class IteratorError(SleeperError):
    """A table iterator failed or broke its contract (e.g. a user iterator returned the wrong schema)."""


class CompactionError(SleeperError):
    """A compaction job could not produce its output (e.g. an input file is missing)."""


class SqlError(QueryError):
    """A SQL statement cannot run: it does not parse, names an unknown table or column,
    or is not a read (DDL, DML and SET are refused)."""


class TableRenamedError(TableNotFoundError):
    """A query asked for a table by a name it no longer has (renamed since its caller
    looked the name up): the name must be looked up again."""
