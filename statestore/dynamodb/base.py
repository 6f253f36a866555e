"""The base of the parts :class:`~statestore.dynamodb.table_commits.DynamoCommits` is
made of (commits, group commit, jobs, ingest queue, client writes, write buffer, blob
sweep, erasure): each reads the client, blob store, cache and retry policy from the
store's one :class:`~statestore.dynamodb.context.DynamoContext`, which the other role
objects (:mod:`.catalog`, :mod:`.leases`, :mod:`.history`, :mod:`.retention`) share too."""

from __future__ import annotations

from statestore.dynamodb.context import DynamoContext
from statestore.role_defaults import StateReads


class DynamoBase(StateReads):
    """What every part of :class:`~statestore.dynamodb.table_commits.DynamoCommits` is
    built on: the shared :attr:`context`, and the reads a table-commits role may answer
    from its whole state (:class:`~statestore.role_defaults.StateReads`)."""

    context: DynamoContext
