"""The DynamoDB state store: the StateStore interface over one role object per role
(:mod:`statestore.roles`), all sharing one :class:`~statestore.dynamodb.context.DynamoContext`
(see the package docstring for the design), and the factory the backend registry calls.

What must commit together is one role method's one TransactWriteItems: a commit with
its job record, ingest requests, buffer entries and client write
(:mod:`.table_commits`, which takes those items from the job tracker, ingest queue,
write buffer and client writes role objects it is built over)."""

from __future__ import annotations

import os
from typing import Any, Optional

from statestore.composed import ComposedStateStore
from statestore.dynamodb.blobs import BlobStore, open_blob_store
from statestore.dynamodb.buffer import DynamoWriteBuffer
from statestore.dynamodb.cache import StateCache
from statestore.dynamodb.catalog import DynamoCatalog
from statestore.dynamodb.client_writes import DynamoClientWrites
from statestore.dynamodb.connection import Dynamo, DynamoOptions
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.erasure import DynamoErasure
from statestore.dynamodb.history import DynamoHistory
from statestore.dynamodb.ingest_queue import DynamoIngestQueue
from statestore.dynamodb.jobs import DynamoJobs
from statestore.dynamodb.leases import DynamoLeases
from statestore.dynamodb.retention import DynamoRetention
from statestore.dynamodb.table_commits import DynamoCommits
from statestore.errors import StateStoreUnavailableError
from statestore.retry import Backoff


def _delegated(owner: str, name: str) -> Any:
    """A property reading and setting ``self.<owner>.<name>`` (``owner`` a dotted path of
    attributes): the store's options and shared parts keep their names on the store
    while the role objects hold them."""
    def holder(self: Any) -> Any:
        out = self
        for part in owner.split("."):
            out = getattr(out, part)
        return out

    def get(self: Any) -> Any:
        return getattr(holder(self), name)

    def put(self: Any, value: Any) -> None:
        setattr(holder(self), name, value)

    return property(get, put, doc=f"``{owner}.{name}`` (settable)")


class DynamoDBStateStore(ComposedStateStore):
    """The state store in DynamoDB and an object store (see the package docstring).

    Args:
        options: where the DynamoDB tables are and their name prefix.
        blobs: where transaction bodies over the item limit and snapshots go.
        backoff: retry policy when another committer took the next log number.
        snapshot_every: write a snapshot after this many transactions since the last...
        snapshot_seconds: ...or after this long, whichever comes first (the committer
            that crosses the line writes it, after its commit).
        retention_margin: :meth:`expire` keeps this many transactions before the
            newest snapshot...
        retention_seconds: ...and everything younger than this, so readers that
            started from an older snapshot can finish.
        group_commit: while other committers commit to the table, commit through
            pending requests that one committer logs in a batch
            (:mod:`statestore.dynamodb.group_commit`; alone, a single commit:
            :mod:`statestore.dynamodb.contention`); False: each commit races for the
            next log number itself.

    Attributes:
        context: the client, blob store, cache and retry policy every role shares.
        commits: the table commits role (:mod:`statestore.dynamodb.table_commits`), built
            over the job tracker, ingest queue, write buffer and client writes roles
            (``job_tracker``, ``ingest_queue``, ``write_buffer``, ``client_writes``).
        retention: the expiry :meth:`expire` and garbage collection run.
    """

    def __init__(self, options: DynamoOptions, blobs: BlobStore, *, backoff: Optional[Backoff] = None,
                 snapshot_every: int = 1000, snapshot_seconds: float = 600.0, retention_margin: int = 100,
                 retention_seconds: float = 3600.0, group_commit: bool = True) -> None:
        self.context = context = DynamoContext(options, blobs, backoff)
        self.retention = DynamoRetention(context, retention_margin=retention_margin,
                                         retention_seconds=retention_seconds)
        client_writes = DynamoClientWrites(context)
        jobs = DynamoJobs(context)
        ingest_queue = DynamoIngestQueue(context, client_writes)
        write_buffer = DynamoWriteBuffer(context, client_writes)
        self.commits = commits = DynamoCommits(context, self.retention, jobs, ingest_queue, write_buffer,
                                               client_writes, snapshot_every=snapshot_every,
                                               snapshot_seconds=snapshot_seconds, group_commit=group_commit)
        erasure = DynamoErasure(context, commits, commits.sweep, self.retention)
        super().__init__(catalog=DynamoCatalog(context), table_commits=commits, job_tracker=jobs,
                         leases=DynamoLeases(context), ingest_queue=ingest_queue, write_buffer=write_buffer,
                         client_writes=client_writes,
                         table_history=DynamoHistory(context, self.retention, erasure.delete_key_records))

    # ----- the shared parts (for tools and tests) and the options, settable ----------------
    _dynamo: Dynamo = _delegated("context", "dynamo")
    _blobs: BlobStore = _delegated("context", "blobs")
    _cache: StateCache = _delegated("context", "cache")
    _backoff: Backoff = _delegated("context", "backoff")
    #: how long a commit whose request was lost keeps trying to learn its outcome
    outcome_timeout_seconds: float = _delegated("commits", "outcome_timeout_seconds")
    group_commit: bool = _delegated("commits", "group_commit")
    snapshot_every: int = _delegated("commits.snapshots", "snapshot_every")
    snapshot_seconds: float = _delegated("commits.snapshots", "snapshot_seconds")
    retention_margin: int = _delegated("retention", "retention_margin")
    retention_seconds: float = _delegated("retention", "retention_seconds")

    # ----- beyond the StateStore interface ------------------------------------------------
    def expire(self, table_id: str, *, now_ms: Optional[int] = None) -> tuple[int, int]:
        """See :meth:`DynamoRetention.expire <statestore.dynamodb.retention.DynamoRetention.expire>`."""
        return self.retention.expire(table_id, now_ms=now_ms)

    def snapshot(self, table_id: str) -> int:
        """Write a snapshot of the table's current state now; returns its transaction number."""
        return self.commits.snapshot(table_id)


def open_dynamodb(*, region: str = "us-east-1", endpoint_url: Optional[str] = None, table_prefix: str = "sleeper-",
                  access_key: Optional[str] = None, secret_key: Optional[str] = None,
                  object_store: Optional[str | os.PathLike[str]] = None,
                  object_store_options: Optional[dict[str, Any]] = None, **store_kwargs: Any) -> DynamoDBStateStore:
    """The DynamoDB state store (the registry's factory). ``object_store``: where large
    transaction bodies and snapshots go, ``s3://bucket/prefix`` or a local directory;
    ``object_store_options``: the S3 client's ``endpoint_url``, ``region``,
    ``access_key``, ``secret_key``. Other keyword arguments go to
    :class:`DynamoDBStateStore`."""
    if object_store is None or not str(object_store):
        raise StateStoreUnavailableError("the DynamoDB state store needs an object store (s3://bucket/prefix or a "
                                         "local directory) for snapshots and large transactions")
    options = DynamoOptions(region=region, endpoint_url=endpoint_url or None, access_key=access_key or None,
                            secret_key=secret_key or None, table_prefix=table_prefix)
    return DynamoDBStateStore(options, open_blob_store(object_store, **(object_store_options or {})), **store_kwargs)
