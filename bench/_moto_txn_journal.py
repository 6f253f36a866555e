"""Make moto's TransactWriteItems cost what DynamoDB's does: O(the items it names).

moto 5.2 (``moto/dynamodb/models/__init__.py``, ``transact_write_items``) deep-copies the
whole table of every item a transaction names before applying any, so that it can put
the tables back when the transaction is cancelled. On moto a transaction therefore costs
(items named x table size), which DynamoDB's does not; a store that keeps its job
records and commit ids in the tables its commits name pays for every item ever written.

:func:`install` keeps moto's checks and writes as they are and changes only the backup:
before moto runs, each item the transaction names is copied (or noted absent); moto's
table copies become the tables themselves, so its own rollback puts back the same
objects; and when moto cancels the transaction, every named item is put back as it was
(in reverse order, so the state is exactly the one before). A transaction may name each
item once (moto raises otherwise, as DynamoDB does), so the journal holds each once.
Used only by the bench's own moto server, on request (``--moto-journal``); the tests run
stock moto.
"""

from __future__ import annotations

import copy
from typing import Any


def install() -> None:
    import moto.dynamodb.models as models
    from moto.dynamodb.models.dynamo_type import DynamoType

    class _NoTableCopy:
        """moto's ``copy`` module as moto's transaction sees it: a table is not copied."""

        def deepcopy(self, x: Any, *args: Any) -> Any:
            return x if isinstance(x, models.Table) else copy.deepcopy(x, *args)

        def __getattr__(self, name: str) -> Any:
            return getattr(copy, name)

    models.copy = _NoTableCopy()  # type: ignore[assignment]
    original = models.DynamoDBBackend.transact_write_items

    def keys_of(self: Any, transact_items: list[dict[str, Any]]) -> list[tuple[Any, DynamoType, Any]]:
        out = []
        for entry in transact_items:
            _, op = next(iter(entry.items()))
            table = self.tables.get(op.get("TableName"))
            if table is None:
                continue  # moto refuses it; nothing of that table is written
            attrs = op["Item"] if "Item" in op else op.get("Key", {})
            if table.hash_key_attr not in attrs:
                continue
            rng = attrs.get(table.range_key_attr) if table.range_key_attr else None
            out.append((table, DynamoType(attrs[table.hash_key_attr]), DynamoType(rng) if rng is not None else None))
        return out

    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        journal = []
        for table, h, r in keys_of(self, transact_items):
            try:
                before = table.get_item(h, r)
            except Exception:  # a malformed key: moto refuses the transaction before writing it
                continue
            journal.append((table, h, r, copy.deepcopy(before)))
        try:
            original(self, transact_items)
        except BaseException:
            for table, h, r, before in reversed(journal):
                if before is None:
                    table.delete_item(h, r)
                elif r is not None:
                    table.items[h][r] = before
                else:
                    table.items[h] = before
            raise

    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
