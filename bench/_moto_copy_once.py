"""Make moto's TransactWriteItems back up each table it names once, not once per item.

moto 5.2 (``moto/dynamodb/models/__init__.py``, ``transact_write_items``) deep-copies the
table of every item of a transaction before applying any, to restore it when the
transaction is cancelled; a table named by 10 items is copied 10 times, so on moto a
transaction costs (items x table size) -- 37 ms per item for an items table of 1,200 job
items here -- which DynamoDB's does not. :func:`install` memoises the copies of each
table within one call: every copy is still taken before the first write, so the backup
(and the rollback) is the same. Used only by the bench's own moto server, on request
(``--moto-copy-once``), to measure the store against a moto whose transaction cost does
not grow with its item count; the tests run stock moto.
"""

from __future__ import annotations

import copy
from typing import Any, Optional


def install() -> None:
    import moto.dynamodb.models as models

    class _CopyOnce:
        memo: Optional[dict[int, Any]] = None

        def deepcopy(self, x: Any, *args: Any) -> Any:
            if self.memo is None or not isinstance(x, models.Table):
                return copy.deepcopy(x, *args)
            if id(x) not in self.memo:
                self.memo[id(x)] = copy.deepcopy(x)
            return self.memo[id(x)]

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

    once = _CopyOnce()
    models.copy = once  # type: ignore[assignment]
    original = models.DynamoDBBackend.transact_write_items

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        once.memo = {}
        try:
            original(self, transact_items)
        finally:
            once.memo = None

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
