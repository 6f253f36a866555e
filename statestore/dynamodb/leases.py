"""Leases in DynamoDB: one item per lease name in the ``leases`` table, written
conditionally (free, expired, or already this holder's), so of two holders racing for
a free lease exactly one gets it. Expiry is judged by the writer's clock."""

from __future__ import annotations

from typing import Optional

from statestore.clock import now_ms
from statestore.dynamodb.connection import get_n, get_s, is_condition_failed, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.leases import Lease


class DynamoLeases:
    """The :class:`~statestore.roles.Leases` role of
    :class:`~statestore.dynamodb.store.DynamoDBStateStore` (see the module docstring)."""

    def __init__(self, context: DynamoContext) -> None:
        self.context = context

    def acquire_lease(self, name: str, holder: str, ttl_seconds: float) -> Optional[Lease]:
        now = now_ms()
        lease = Lease(name, holder, now + int(ttl_seconds * 1000))
        d = self.context.dynamo
        try:
            d.call(f"take lease {name!r}", d.client.put_item,
                TableName=d.table("leases"), Item={"name": s(name), "holder": s(holder), "expires_ms": n(
                    lease.expires_ms)},
                ConditionExpression="attribute_not_exists(#name) OR holder = :h OR expires_ms <= :now",
                ExpressionAttributeNames={"#name": "name"},
                ExpressionAttributeValues={":h": s(holder), ":now": n(now)})
        except Exception as e:
            if is_condition_failed(e):
                return None
            raise
        return lease

    def release_lease(self, name: str, holder: str) -> bool:
        d = self.context.dynamo
        try:
            d.call(f"release lease {name!r}", d.client.delete_item,
                TableName=d.table("leases"), Key={"name": s(name)}, ConditionExpression="holder = :h",
                ExpressionAttributeValues={":h": s(holder)})
        except Exception as e:
            if is_condition_failed(e):
                return False
            raise
        return True

    def get_lease(self, name: str) -> Optional[Lease]:
        item = self.context.dynamo.get(f"read lease {name!r}", "leases", {"name": s(name)})
        if item is None:
            return None
        lease = Lease(name, get_s(item, "holder") or "", get_n(item, "expires_ms") or 0)
        return lease if lease.expires_ms > now_ms() else None
