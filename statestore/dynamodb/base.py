"""What every role module of the DynamoDB store shares: the client, the blob store,
the state cache, the retry policy, and the check that a table id is in the catalog."""

from __future__ import annotations

from typing import Any

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.cache import StateCache
from statestore.dynamodb.connection import Dynamo, s
from statestore.errors import TableNotFoundError
from statestore.retry import Backoff
from statestore.store import StateStore


class DynamoBase(StateStore):
    """The parts :class:`~statestore.dynamodb.store.DynamoDBStateStore` is built on."""

    _dynamo: Dynamo
    _blobs: BlobStore
    _cache: StateCache
    _backoff: Backoff

    def _table_item(self, table_id: str) -> dict[str, Any]:
        """The catalog item of ``table_id``; raises TableNotFoundError."""
        item = self._dynamo.get(f"look up table {table_id}", "catalog", {"pk": s(f"id#{table_id}")})
        if item is None:
            raise TableNotFoundError(f"no table with id {table_id}")
        return item

    def _require_table_id(self, table_id: str) -> None:
        self._table_item(table_id)
