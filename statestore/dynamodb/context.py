"""What every role object of the DynamoDB store shares: one client with the store's
tables, one object store, one state cache, one retry policy (the way the PostgreSQL
roles share one :class:`~statestore.postgres.connections.PostgresConnection`).

Sharing one context is what keeps the roles consistent with each other: a table one
role deletes is forgotten by the cache every other role reads through, and a blob one
role spills is in the object store the others read and sweep."""

from __future__ import annotations

from typing import Any, Optional

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.cache import StateCache
from statestore.dynamodb.connection import Dynamo, DynamoOptions, s
from statestore.errors import TableNotFoundError
from statestore.retry import Backoff


class DynamoContext:
    """The client (:attr:`dynamo`), the object store for large bodies and snapshots
    (:attr:`blobs`), each table's cached state (:attr:`cache`) and the retry policy
    when another writer moved first (:attr:`backoff`). Thread-safe as its parts are."""

    def __init__(self, options: DynamoOptions, blobs: BlobStore, backoff: Optional[Backoff] = None) -> None:
        self.dynamo = Dynamo(options)
        self.blobs = blobs
        self.cache = StateCache(self.dynamo, blobs)
        self.backoff = backoff or Backoff()

    def table_item(self, table_id: str) -> dict[str, Any]:
        """The catalog item of ``table_id`` (one consistent read); raises TableNotFoundError."""
        item = self.dynamo.get(f"look up table {table_id}", "catalog", {"pk": s(f"id#{table_id}")})
        if item is None:
            raise TableNotFoundError(f"no table with id {table_id}")
        return item

    def require_table_id(self, table_id: str) -> None:
        """Raise TableNotFoundError unless ``table_id`` is in the catalog."""
        self.table_item(table_id)
