"""Retention in the DynamoDB store: commit ids, the group commit's old requests and
verdicts, and old transactions and snapshots (the part of
:class:`~statestore.dynamodb.store.DynamoDBStateStore` garbage collection runs)."""

from __future__ import annotations

from typing import Optional

from statestore import clock
from statestore.dynamodb import snapshots
from statestore.dynamodb.catalog import table_info as catalog_info
from statestore.dynamodb.connection import n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.group_batch import prune_requests
from statestore.history import retention_ms


class DynamoRetention:
    """Pruning and expiry (see the module docstring). :attr:`retention_margin` and
    :attr:`retention_seconds` are the store's options of those names (settable)."""

    def __init__(self, context: DynamoContext, *, retention_margin: int, retention_seconds: float) -> None:
        self.context = context
        self.retention_margin = retention_margin
        self.retention_seconds = retention_seconds

    def prune_commit_ids(self, table_id: str, before_ms: int) -> int:
        """See :meth:`StateStore.prune_commit_ids`; also applies :meth:`expire`."""
        self.context.require_table_id(table_id)
        d = self.context.dynamo
        old = [it for it in d.query(f"list the commit ids of table {table_id}", "items",
                                    "table_id = :t AND begins_with(sk, :c)", {":t": s(table_id), ":c": s("c#")})
               if int(it["applied_ms"]["N"]) < before_ms]
        d.batch_delete(f"prune commit ids of table {table_id}", "items",
                       [{"table_id": it["table_id"], "sk": it["sk"]} for it in old])
        prune_requests(d, table_id, before_ms)  # statestore.dynamodb.group_commit
        self.expire(table_id)
        return len(old)

    def expire(self, table_id: str, *, now_ms: Optional[int] = None) -> tuple[int, int]:
        """Delete the table's transactions numbered at or below the newest snapshot's
        minus :attr:`retention_margin`, and its snapshots but the newest, that are older
        than :attr:`retention_seconds`, keeping what the table's history retention needs
        (:mod:`statestore.dynamodb.history`): the newest snapshot made before the
        retention began and every transaction from its number on (all of them while no
        snapshot is that old). Returns (transactions, snapshots) deleted. Readers
        holding an older state reload from the newest snapshot when they find the gap."""
        now = clock.now_ms() if now_ms is None else now_ms
        cutoff_ms = now - int(self.retention_seconds * 1000)
        d = self.context.dynamo
        pointers = snapshots.all_pointers(d, table_id)
        if not pointers:
            return 0, 0
        newest = pointers[-1]
        history_from = now - retention_ms(catalog_info(self.context.table_item(table_id)))
        # strictly before: the state before a transaction committed as the retention began
        # is retained (resolve_number refuses only a successor before it), so a snapshot
        # made at that instant is too new a base to rebuild it from
        base = max((p.n for p in pointers if p.time_ms < history_from), default=0)
        what = f"expire the transactions of table {table_id}"
        old_log = [it for it in d.query(what, "log", "table_id = :t AND n <= :n",
                                        {":t": s(table_id), ":n": n(min(newest.n - self.retention_margin, base - 1))},
                                        projection="table_id, n, time_ms, body_key")
                   if int(it["time_ms"]["N"]) < cutoff_ms]
        d.batch_delete(what, "log", [{"table_id": it["table_id"], "n": it["n"]} for it in old_log])
        self.context.blobs.delete([it["body_key"]["S"] for it in old_log if "body_key" in it])
        old_snaps = [p for p in pointers[:-1] if p.time_ms < cutoff_ms and p.n < base]
        d.batch_delete(what, "snapshots", [{"table_id": s(table_id), "n": n(p.n)} for p in old_snaps])
        self.context.blobs.delete([p.key for p in old_snaps])
        return len(old_log), len(old_snaps)
