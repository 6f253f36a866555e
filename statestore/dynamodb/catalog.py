"""The table catalog in DynamoDB: two items per table in the ``catalog`` table,
``name#<name>`` (the name, taken conditionally, pointing to the id) and
``id#<table id>`` (name, schema, properties and a revision).

* create writes both items and the first log item (InitialisePartitions) in one
  TransactWriteItems, conditional on the name being free; when the name is taken, the
  name item is read: naming our fresh table id, it is a try of ours whose reply was
  lost (the create succeeded);
* rename moves the name item and updates the id item in one TransactWriteItems,
  conditional on the new name being free and the old one still pointing to the table;
  a cancelled rename that finds the table under its new name is a try of ours whose
  reply was lost (likewise a cancelled delete that finds the table gone);
* update_properties is a conditional update on the revision it read (retried);
* delete removes both catalog items atomically -- from then on the table is gone for
  every reader and committer -- and then its log, snapshots, jobs, requests and
  commit ids (not atomically; a crash leaves unreachable items behind);
* the store's instance id is the item ``instance``, put on first asking with the condition
  ``attribute_not_exists(pk)`` and then read (consistently): racing processes read the
  one that won, and an existing id is never rewritten.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Mapping, Optional, Sequence

from statestore.catalog import TableInfo
from statestore.clock import now_ms
from statestore.dynamodb import snapshots
from statestore.dynamodb.blobs import table_blob_prefixes
from statestore.dynamodb.connection import cancellation_codes, get_n, get_s, is_condition_failed, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.ingest_queue import MAX_TRANSACTION_ITEMS
from statestore.dynamodb.log import EncodedTransaction
from statestore.dynamodb.writes import cleanup_on_refusal
from statestore.errors import StateStoreUnavailableError, TableExistsError, TableNotFoundError
from statestore.partitions import Partition
from statestore.properties import (
    INGEST_BATCHER_JOB_MAX_FILES,
    apply_update,
    check_backend_limits,
    check_combination,
    validate_properties,
    validate_values,
)
from statestore.schema import Schema
from statestore.state import TableState
from statestore.transactions import InitialisePartitions

#: numeric properties this backend cannot honour above a value, and why (checked when set)
PROPERTY_LIMITS: dict[str, tuple[int, str]] = {
    INGEST_BATCHER_JOB_MAX_FILES: (
        MAX_TRANSACTION_ITEMS, "a batcher job's requests are assigned in one DynamoDB transaction, which holds at "
                               "most 100 items"),
}


def table_info(item: dict[str, Any]) -> TableInfo:
    pk = get_s(item, "pk") or ""
    return TableInfo(pk[len("id#"):], get_s(item, "name") or "", Schema.from_json(get_s(item, "schema") or ""),
                     json.loads(get_s(item, "properties") or "{}"))


class DynamoCatalog:
    """The :class:`~statestore.roles.TableCatalog` role of
    :class:`~statestore.dynamodb.store.DynamoDBStateStore` (see the module docstring)."""

    def __init__(self, context: DynamoContext) -> None:
        self.context = context
        self._instance_id: Optional[str] = None

    def instance_id(self) -> str:
        """The ``instance`` item of the catalog table (see the module docstring); read once
        per store object, it never changes."""
        if self._instance_id is not None:
            return self._instance_id
        d = self.context.dynamo
        key = {"pk": s("instance")}
        item = d.get("read the instance id", "catalog", key)
        if item is None:
            try:
                d.call("create the instance id", d.client.put_item, TableName=d.table("catalog"),
                       Item={**key, "instance_id": s(str(uuid.uuid4()))},
                       ConditionExpression="attribute_not_exists(pk)")
            except Exception as e:
                if not is_condition_failed(e):
                    raise
            item = d.get("read the instance id", "catalog", key)
        found = get_s(item, "instance_id") if item is not None else None
        if not found:
            raise StateStoreUnavailableError("the state store's instance id could not be read after creating it")
        self._instance_id = found
        return found

    def create_table(self, name: str, schema: Schema, partitions: Sequence[Partition],
                     properties: Optional[Mapping[str, str]] = None) -> TableInfo:
        props = validate_properties(properties or {})
        check_backend_limits(props, PROPERTY_LIMITS, "DynamoDB")
        init = InitialisePartitions(tuple(partitions))
        init.validate(TableState())
        table_id = uuid.uuid4().hex
        encoded = EncodedTransaction.of(table_id, init, self.context.blobs)
        d = self.context.dynamo
        catalog = d.table("catalog")
        items = [
            {"Put": {"TableName": catalog, "Item": {"pk": s(f"name#{name}"), "table_id": s(table_id)},
                     "ConditionExpression": "attribute_not_exists(pk)"}},
            {"Put": {"TableName": catalog, "Item": {
                "pk": s(f"id#{table_id}"), "name": s(name), "schema": s(schema.to_json()),
                "properties": s(json.dumps(props)), "rev": n(0)}}},
            {"Put": {"TableName": d.table("log"), "Item": encoded.item(table_id, 1, uuid.uuid4().hex,
                                                                       now_ms())}},
        ]
        what = f"create table {name!r}"
        with cleanup_on_refusal(self.context.blobs, [encoded.blob_key], what):
            try:
                d.call(what, d.client.transact_write_items, TransactItems=items)
            except Exception as e:
                if cancellation_codes(e)[:1] != ["ConditionalCheckFailed"]:
                    raise
                # the name is taken -- by another table, or by a try of ours whose reply was lost
                named = d.get(f"{what} (check for our own earlier write)", "catalog", {"pk": s(f"name#{name}")})
                if named is None or get_s(named, "table_id") != table_id:
                    raise TableExistsError(f"table {name!r} already exists") from None
        return TableInfo(table_id, name, schema, props)

    def list_tables(self) -> list[TableInfo]:
        d = self.context.dynamo
        kwargs: dict[str, Any] = {"TableName": d.table("catalog"), "ConsistentRead": True,
                                  "FilterExpression": "begins_with(pk, :p)", "ExpressionAttributeValues": {
                                      ":p": s("id#")}}
        out: list[TableInfo] = []
        while True:
            page = d.call("list tables", d.client.scan, **kwargs)
            out.extend(table_info(it) for it in page.get("Items", []))
            if not page.get("LastEvaluatedKey"):
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(out, key=lambda t: t.name)

    def _get_item(self, name: str) -> dict[str, Any]:
        """The id item of the table called ``name``; raises TableNotFoundError."""
        for _ in range(5):
            named = self.context.dynamo.get(f"look up table {name!r}", "catalog", {"pk": s(f"name#{name}")})
            if named is None:
                break
            item = self.context.dynamo.get(f"look up table {name!r}", "catalog",
                                    {"pk": s(f"id#{get_s(named, 'table_id')}")})
            if item is not None and get_s(item, "name") == name:
                return item
            # renamed or deleted between the two reads: look again
        raise TableNotFoundError(f"table {name!r} does not exist")

    def get_table(self, name: str) -> TableInfo:
        return table_info(self._get_item(name))

    def update_properties(self, name: str, properties: Mapping[str, str]) -> TableInfo:
        props = validate_values(properties)
        check_backend_limits(props, PROPERTY_LIMITS, "DynamoDB")
        d = self.context.dynamo
        for attempt in range(self.context.backoff.max_attempts):
            item = self._get_item(name)
            info = table_info(item)
            merged = apply_update(info.properties, props)
            check_combination(merged)
            try:
                d.call(f"update the properties of table {name!r}", d.client.update_item,
                    TableName=d.table("catalog"), Key={"pk": item["pk"]},
                    UpdateExpression="SET properties = :p, rev = :next",
                    ConditionExpression="rev = :rev AND #name = :name",
                    ExpressionAttributeNames={"#name": "name"},
                    ExpressionAttributeValues={":p": s(json.dumps(merged)), ":rev": item["rev"],
                                               ":next": n((get_n(item, "rev") or 0) + 1), ":name": s(name)})
            except Exception as e:
                if not is_condition_failed(e):
                    raise
                self.context.backoff.pause(attempt)  # changed meanwhile: read it again
                continue
            return TableInfo(info.table_id, info.name, info.schema, merged)
        raise TableNotFoundError(f"table {name!r} kept changing; properties not updated")

    def rename_table(self, old: str, new: str) -> TableInfo:
        d = self.context.dynamo
        catalog = d.table("catalog")
        for attempt in range(self.context.backoff.max_attempts):
            item = self._get_item(old)
            info = table_info(item)
            if new == old:
                raise TableExistsError(f"table {new!r} already exists")
            items = [
                {"Delete": {"TableName": catalog, "Key": {"pk": s(f"name#{old}")},
                            "ConditionExpression": "table_id = :t", "ExpressionAttributeValues": {
                                ":t": s(info.table_id)}}},
                {"Put": {"TableName": catalog, "Item": {"pk": s(f"name#{new}"), "table_id": s(info.table_id)},
                         "ConditionExpression": "attribute_not_exists(pk)"}},
                {"Update": {"TableName": catalog, "Key": {"pk": item["pk"]}, "UpdateExpression": "SET #name = :new",
                            "ConditionExpression": "#name = :old", "ExpressionAttributeNames": {"#name": "name"},
                            "ExpressionAttributeValues": {":new": s(new), ":old": s(old)}}},
            ]
            try:
                d.call(f"rename table {old!r} to {new!r}", d.client.transact_write_items,
                       TransactItems=items)
            except Exception as e:
                codes = cancellation_codes(e)
                if not codes:
                    raise
                if self._renamed(info.table_id, new):  # by a try of ours whose reply was lost
                    return TableInfo(info.table_id, new, info.schema, info.properties)
                if codes[1] == "ConditionalCheckFailed":
                    raise TableExistsError(f"table {new!r} already exists") from None
                self.context.backoff.pause(attempt)  # the old name changed meanwhile
                continue
            return TableInfo(info.table_id, new, info.schema, info.properties)
        raise TableNotFoundError(f"table {old!r} kept changing; not renamed")

    def _renamed(self, table_id: str, new: str) -> bool:
        """Whether the table is now called ``new`` (both catalog items say so)."""
        what = f"rename table {table_id} to {new!r} (check for our own earlier write)"
        named = self.context.dynamo.get(what, "catalog", {"pk": s(f"name#{new}")})
        if named is None or get_s(named, "table_id") != table_id:
            return False
        item = self.context.dynamo.get(what, "catalog", {"pk": s(f"id#{table_id}")})
        return item is not None and get_s(item, "name") == new

    def delete_table(self, name: str) -> TableInfo:
        d = self.context.dynamo
        catalog = d.table("catalog")
        for attempt in range(self.context.backoff.max_attempts):
            item = self._get_item(name)
            info = table_info(item)
            items = [
                {"Delete": {"TableName": catalog, "Key": {"pk": s(f"name#{name}")},
                            "ConditionExpression": "table_id = :t", "ExpressionAttributeValues": {
                                ":t": s(info.table_id)}}},
                {"Delete": {"TableName": catalog, "Key": {"pk": item["pk"]},
                            "ConditionExpression": "attribute_exists(pk)"}},
            ]
            try:
                d.call(f"delete table {name!r}", d.client.transact_write_items,
                       TransactItems=items)
            except Exception as e:
                if not cancellation_codes(e):
                    raise
                if self.context.dynamo.get(f"delete table {name!r} (check for our own earlier write)", "catalog",
                                    {"pk": item["pk"]}) is not None:
                    self.context.backoff.pause(attempt)
                    continue
                # gone: deleted by a try of ours whose reply was lost (or by a racing delete)
            self.context.cache.forget(info.table_id)
            self._remove_state(info.table_id)
            return info
        raise TableNotFoundError(f"table {name!r} kept changing; not deleted")

    def _remove_state(self, table_id: str) -> None:
        """Everything of a table no longer in the catalog: its log, snapshots, items and
        blobs -- those its items named and every other blob under its prefixes (buffered
        writes, job records, leftovers of unknown outcomes: no sweep runs for a table no
        longer in the catalog)."""
        d = self.context.dynamo
        what = f"remove the state of deleted table {table_id}"
        keys = [get_s(it, "body_key") for it in d.query(what, "log", "table_id = :t", {":t": s(table_id)},
                                                        projection="body_key")]
        keys += [p.key for p in snapshots.all_pointers(d, table_id)]
        for role in ("log", "snapshots", "items", "requests"):  # requests: statestore.dynamodb.group_commit
            d.delete_partition(what, role, table_id)
        keys += [k for prefix in table_blob_prefixes(table_id) for k, _ in self.context.blobs.list(prefix)]
        self.context.blobs.delete(sorted({k for k in keys if k}))
