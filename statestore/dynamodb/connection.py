"""The DynamoDB client, the store's tables (created on first use) and the translation
of DynamoDB's errors into the state store's.

Tables, each named ``<table_prefix><role>``, all PAY_PER_REQUEST:

========== ======================= =============== ==================================
role       hash key                range key       items
========== ======================= =============== ==================================
catalog    ``pk`` (S)              --              ``name#<name>`` -> table id;
                                                   ``id#<table id>`` -> name, schema,
                                                   properties
log        ``table_id`` (S)        ``n`` (N)       one per transaction (1, 2, ...)
snapshots  ``table_id`` (S)        ``n`` (N)       pointer to a snapshot of state n
items      ``table_id`` (S)        ``sk`` (S)      ``c#`` commit ids, ``j#`` job
                                                   records, ``r#`` ingest requests,
                                                   ``e#`` ended ingest jobs
leases     ``name`` (S)            --              one per lease
requests   ``table_id`` (S)        ``sk`` (S)      ``p#`` pending commits, ``x#``
                                                   their verdicts (group commit)
========== ======================= =============== ==================================
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, TypeVar

import boto3
import botocore.exceptions
from botocore.config import Config

from statestore.errors import StateStoreUnavailableError

T = TypeVar("T")

#: role -> (hash key, its type, range key or None, its type)
TABLES: dict[str, tuple[str, str, Optional[str], str]] = {
    "catalog": ("pk", "S", None, ""),
    "log": ("table_id", "S", "n", "N"),
    "snapshots": ("table_id", "S", "n", "N"),
    "items": ("table_id", "S", "sk", "S"),
    "leases": ("name", "S", None, ""),
    "requests": ("table_id", "S", "sk", "S"),
}

#: errors that mean the request may or may not have reached DynamoDB
CONNECTION_ERRORS = (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
                     botocore.exceptions.ReadTimeoutError, botocore.exceptions.ConnectTimeoutError)


@dataclass(frozen=True)
class DynamoOptions:
    """Where the DynamoDB tables are: region, endpoint (e.g. a local emulator), the
    credentials (None: boto3's usual chain) and the prefix of every table name."""

    region: str = "us-east-1"
    endpoint_url: Optional[str] = None
    access_key: Optional[str] = None
    secret_key: Optional[str] = None
    table_prefix: str = "sleeper-"


def s(v: str) -> dict[str, Any]:
    return {"S": v}


def n(v: int) -> dict[str, Any]:
    return {"N": str(v)}


def b(v: bytes) -> dict[str, Any]:
    return {"B": v}


def get_s(item: Mapping[str, Any], key: str) -> Optional[str]:
    v = item.get(key)
    return None if v is None else str(v["S"])


def get_n(item: Mapping[str, Any], key: str) -> Optional[int]:
    v = item.get(key)
    return None if v is None else int(v["N"])


def error_code(e: BaseException) -> str:
    if isinstance(e, botocore.exceptions.ClientError):
        return str(e.response.get("Error", {}).get("Code", ""))
    return ""


def cancellation_codes(e: BaseException) -> list[str]:
    """The reason codes of a cancelled TransactWriteItems, one per item ("None": fine)."""
    if not isinstance(e, botocore.exceptions.ClientError):
        return []
    return [str(r.get("Code", "None")) for r in e.response.get("CancellationReasons", [])]


#: the AWS services whose clients the store makes: DynamoDB, and S3 for its blobs
CLIENT_SERVICES = ("dynamodb", "s3")


def load_client_models() -> list[str]:
    """Load botocore's models of :data:`CLIENT_SERVICES` into boto3's default session,
    where the store's clients are made, by making a client of each with placeholder keys
    and a fixed region (nothing resolved from the environment, no request sent) and
    dropping it; the services loaded. A process that forks many short-lived ones (an
    Airflow DAG processor or worker) calls it once, so the forked ones do not each parse
    the models afresh. Any failure (a broken AWS configuration file) leaves that service
    to its first real client, which reports it."""
    loaded = []
    for service in CLIENT_SERVICES:
        try:
            boto3.client(service, region_name="us-east-1", aws_access_key_id="warm", aws_secret_access_key="warm")
        except Exception:
            continue
        loaded.append(service)
    return loaded


def is_transaction_cancelled(e: BaseException) -> bool:
    return error_code(e) == "TransactionCanceledException"


def is_condition_failed(e: BaseException) -> bool:
    return error_code(e) == "ConditionalCheckFailedException"


class Dynamo:
    """A thread-safe DynamoDB client with the store's table names, creating each table
    the first time it is used (and waiting until it is active)."""

    def __init__(self, options: DynamoOptions) -> None:
        self.options = options
        self.client = boto3.client(
            "dynamodb", region_name=options.region, endpoint_url=options.endpoint_url,
            aws_access_key_id=options.access_key, aws_secret_access_key=options.secret_key,
            config=Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32))
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    def table(self, role: str) -> str:
        """The name of the table of ``role``, created if missing."""
        name = self.options.table_prefix + role
        if name not in self._ready:
            with self._lock:
                if name not in self._ready:
                    self._create(name, role)
                    self._ready.add(name)
        return name

    def _create(self, name: str, role: str) -> None:
        """Create the table unless it is there and active (one round trip when it is)."""
        try:
            if self.client.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE":
                return
        except botocore.exceptions.ClientError as e:
            if error_code(e) != "ResourceNotFoundException":
                raise self.unavailable(f"look up the DynamoDB table {name}", e) from e
        except (botocore.exceptions.BotoCoreError, OSError) as e:
            raise self.unavailable(f"look up the DynamoDB table {name}", e) from e
        hash_key, hash_type, range_key, range_type = TABLES[role]
        keys = [{"AttributeName": hash_key, "KeyType": "HASH"}]
        attrs = [{"AttributeName": hash_key, "AttributeType": hash_type}]
        if range_key is not None:
            keys.append({"AttributeName": range_key, "KeyType": "RANGE"})
            attrs.append({"AttributeName": range_key, "AttributeType": range_type})
        try:
            self.client.create_table(TableName=name, KeySchema=keys, AttributeDefinitions=attrs,
                                     BillingMode="PAY_PER_REQUEST")
        except botocore.exceptions.ClientError as e:
            if error_code(e) != "ResourceInUseException":  # created by another process
                raise self.unavailable(f"create the DynamoDB table {name}", e) from e
        except (botocore.exceptions.BotoCoreError, OSError) as e:
            raise self.unavailable(f"create the DynamoDB table {name}", e) from e
        deadline = time.monotonic() + 60
        while True:
            status = self.client.describe_table(TableName=name)["Table"]["TableStatus"]
            if status == "ACTIVE":
                return
            if time.monotonic() > deadline:
                raise StateStoreUnavailableError(f"the DynamoDB table {name} did not become active ({status})")
            time.sleep(0.5)

    def unavailable(self, what: str, e: BaseException) -> StateStoreUnavailableError:
        where = self.options.endpoint_url or f"region {self.options.region}"
        return StateStoreUnavailableError(f"cannot {what} (DynamoDB at {where}): {e}")

    def call(self, what: str, fn: Callable[..., T], /, **kwargs: Any) -> T:
        """``fn(**kwargs)``; errors other than a failed condition or a cancelled
        transaction become StateStoreUnavailableError (those two are the caller's)."""
        try:
            return fn(**kwargs)
        except botocore.exceptions.ClientError as e:
            if is_condition_failed(e) or is_transaction_cancelled(e):
                raise
            raise self.unavailable(what, e) from e
        except (botocore.exceptions.BotoCoreError, OSError) as e:
            raise self.unavailable(what, e) from e

    def query(self, what: str, role: str, key_condition: str, values: dict[str, Any], *,
              forward: bool = True, limit: Optional[int] = None, names: Optional[dict[str, str]] = None,
              projection: Optional[str] = None) -> Iterator[dict[str, Any]]:
        """The items of a strongly consistent query, page after page."""
        kwargs: dict[str, Any] = {"TableName": self.table(role), "KeyConditionExpression": key_condition,
                                  "ExpressionAttributeValues": values, "ConsistentRead": True,
                                  "ScanIndexForward": forward}
        if names:
            kwargs["ExpressionAttributeNames"] = names
        if projection:
            kwargs["ProjectionExpression"] = projection
        if limit is not None:
            kwargs["Limit"] = limit
        while True:
            page = self.call(what, self.client.query, **kwargs)
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last or limit is not None:
                return
            kwargs["ExclusiveStartKey"] = last

    def get(self, what: str, role: str, key: dict[str, Any]) -> Optional[dict[str, Any]]:
        out = self.call(what, self.client.get_item, TableName=self.table(role), Key=key,
                        ConsistentRead=True)
        item: Optional[dict[str, Any]] = out.get("Item")
        return item

    def delete_partition(self, what: str, role: str, hash_value: str) -> int:
        """Delete every item whose hash key is ``hash_value`` (not atomic); returns how many."""
        hash_key, _, range_key, _ = TABLES[role]
        assert range_key is not None
        keys = [{hash_key: it[hash_key], range_key: it[range_key]} for it in self.query(
            what, role, "#h = :h", {":h": s(hash_value)}, names={"#h": hash_key, "#r": range_key},
            projection="#h, #r")]
        self.batch_delete(what, role, keys)
        return len(keys)

    def batch_delete(self, what: str, role: str, keys: list[dict[str, Any]]) -> None:
        table = self.table(role)
        for i in range(0, len(keys), 25):
            requests: dict[str, Any] = {table: [{"DeleteRequest": {"Key": k}} for k in keys[i:i + 25]]}
            for attempt in range(10):
                out = self.call(what, self.client.batch_write_item, RequestItems=requests)
                requests = out.get("UnprocessedItems") or {}
                if not requests:
                    break
                time.sleep(0.05 * 2 ** attempt)
