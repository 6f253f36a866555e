"""The owner's requests and verdicts in group commit
(:mod:`statestore.dynamodb.group_commit`, steps 1, 3 and 4): putting a pending request,
reading the table's pending requests, reading a request's verdict, cleaning up after it,
and withdrawing a request whose verdict did not come in time: :class:`GroupRequests`,
over the store's one :class:`~statestore.dynamodb.context.DynamoContext`."""

from __future__ import annotations

import logging
import time
from typing import Any, Optional

import botocore.exceptions

from statestore.dynamodb.commits import commit_id_key
from statestore.dynamodb.connection import get_s, is_condition_failed, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.group_batch import (
    MAX_REQUESTS,
    PENDING,
    REQUESTS,
    VERDICT,
    Request,
    Verdict,
    pending_key,
    read_items,
    verdict_key,
)
from statestore.errors import CommitOutcomeUnknownError, StateStoreUnavailableError

log = logging.getLogger(__name__)

#: the owner's first pause between polls (withdrawing backs off from it too)
POLL_FIRST = 0.002


class GroupRequests:
    """The requests and verdicts part of group commit (see the module docstring)."""

    def __init__(self, context: DynamoContext) -> None:
        self.context = context

    def put_pending(self, item: dict[str, Any], what: str) -> None:
        """Put the request unless an item of its commit id is there already (ours, put
        by an earlier try of this put, or another call's with the same id: the polls
        tell which)."""
        d = self.context.dynamo
        try:
            d.call(f"{what}: request", d.client.put_item, TableName=d.table(REQUESTS), Item=item,
                   ConditionExpression="attribute_not_exists(sk)")
        except botocore.exceptions.ClientError as e:
            if not is_condition_failed(e):
                raise

    def pending(self, table_id: str) -> list[Request]:
        """The table's pending requests (at most :data:`~.group_batch.MAX_REQUESTS`)."""
        return [Request.of(it) for it in self.context.dynamo.query(
            f"read the pending commits of table {table_id}", REQUESTS, "table_id = :t AND begins_with(sk, :p)",
            {":t": s(table_id), ":p": s(PENDING)}, limit=MAX_REQUESTS)]

    def read_verdict(self, table_id: str, commit_id: str, nonce: str) -> tuple[Optional[Verdict], bool]:
        """The verdict of this call's request (None: none yet), and whether its pending
        item is there (with a verdict: a retried put's stale re-creation)."""
        mine = [verdict_key(table_id, commit_id), pending_key(table_id, commit_id)]
        got = read_items(self.context.dynamo, table_id, {"items": [commit_id_key(table_id, commit_id)], REQUESTS: mine})
        pending = got.get(f"{PENDING}{commit_id}")
        ours = pending is not None and get_s(pending, "nonce") == nonce
        applied = got.get(f"c#{commit_id}")
        if applied is not None and get_s(applied, "by") == nonce:
            return Verdict("applied", nonce), ours
        told = got.get(f"{VERDICT}{commit_id}")
        if told is not None and get_s(told, "nonce") == nonce:
            return Verdict.of(told), ours
        return None, ours

    def delete_pending(self, table_id: str, commit_id: str, nonce: str) -> None:
        """Delete this call's pending item if it is there (a failed condition: it is not)."""
        d = self.context.dynamo
        try:
            d.call(f"withdraw commit {commit_id} of table {table_id}", d.client.delete_item,
                   TableName=d.table(REQUESTS), Key=pending_key(table_id, commit_id),
                   ConditionExpression="nonce = :n", ExpressionAttributeValues={":n": s(nonce)})
        except botocore.exceptions.ClientError as e:
            if not is_condition_failed(e):
                raise

    def settled(self, table_id: str, commit_id: str, verdict: Verdict, stale: bool) -> Verdict:
        """Clean up after a verdict (best effort: leftovers go to ``prune_commit_ids``):
        a stale pending item first, then the verdict item, which while the pending item
        is there tells a leader not to decide it again."""
        try:
            if stale:
                self.delete_pending(table_id, commit_id, verdict.nonce)
            if verdict.kind != "applied":
                d = self.context.dynamo
                d.call(f"clear the verdict of commit {commit_id}", d.client.delete_item, TableName=d.table(REQUESTS),
                       Key=verdict_key(table_id, commit_id))
        except StateStoreUnavailableError as e:
            log.warning("commit %s of table %s: its items are left to the prune: %s", commit_id, table_id, e)
        return verdict

    def withdraw(self, table_id: str, commit_id: str, nonce: str, what: str,
                 last: Optional[BaseException], timeout_seconds: float) -> Verdict:
        """Delete this call's pending item and read what became of it: its verdict if a
        leader decided it first, else ``withdrawn`` (it can never apply). DynamoDB lost
        for ``timeout_seconds``: CommitOutcomeUnknownError."""
        deadline = time.monotonic() + timeout_seconds
        pause = POLL_FIRST
        while True:
            try:
                self.delete_pending(table_id, commit_id, nonce)
                verdict, there = self.read_verdict(table_id, commit_id, nonce)
                if verdict is not None:
                    return self.settled(table_id, commit_id, verdict, there)
                if not there:
                    why = f": {last}" if last is not None else ""
                    return Verdict("withdrawn", nonce, message=why)
            except StateStoreUnavailableError as e:
                last = e
                if time.monotonic() >= deadline:
                    raise CommitOutcomeUnknownError(
                        f"{what}: DynamoDB was lost while the commit was pending and did not come back within "
                        f"{timeout_seconds:g}s, so whether it applied is unknown "
                        f"(commit id {commit_id}): {e}") from e
            time.sleep(pause)
            pause = min(1.0, pause * 2)
