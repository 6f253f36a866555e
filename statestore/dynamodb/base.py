"""The base of the DynamoDB store's parts still written as mixins (commits, group
commit, jobs, ingest queue, client writes, write buffer, blob sweep, erasure): their
client, blob store, cache and retry policy are the store's one
:class:`~statestore.dynamodb.context.DynamoContext`, which the role objects
(:mod:`.catalog`, :mod:`.leases`, :mod:`.history`, :mod:`.retention`) share too."""

from __future__ import annotations

from typing import Any

from statestore.dynamodb.blobs import BlobStore
from statestore.dynamodb.cache import StateCache
from statestore.dynamodb.connection import Dynamo
from statestore.dynamodb.context import DynamoContext
from statestore.retry import Backoff
from statestore.role_defaults import StateReads


class DynamoBase(StateReads):
    """The parts :class:`~statestore.dynamodb.table_commits.DynamoCommits` is built on,
    read from the store's shared :attr:`context`."""

    context: DynamoContext

    @property
    def _dynamo(self) -> Dynamo:
        return self.context.dynamo

    @property
    def _blobs(self) -> BlobStore:
        return self.context.blobs

    @property
    def _cache(self) -> StateCache:
        return self.context.cache

    @property
    def _backoff(self) -> Backoff:
        return self.context.backoff

    def _table_item(self, table_id: str) -> dict[str, Any]:
        """The catalog item of ``table_id``; raises TableNotFoundError."""
        return self.context.table_item(table_id)

    def _require_table_id(self, table_id: str) -> None:
        self.context.require_table_id(table_id)
