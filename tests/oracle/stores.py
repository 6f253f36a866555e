"""The homes the erasure oracle drives (tests/integration/test_erasure_oracle.py), as a
JSON-able spec, so a writer process killed with SIGKILL opens the same one:

* ``{"backend": "postgres", "dsn": ..., "data": <local directory>}`` (and ``connect_timeout``;
  ``spark``: a Spark master, for bulk import: the Sleeper is opened from a configuration);
  either may set ``outcome_timeout``: how long a store tries to learn a commit's outcome;
* ``{"backend": "dynamodb", "endpoint": ..., "table_prefix": ..., "bucket": ..., "prefix": ...}``:
  the state in DynamoDB, the data under ``s3://bucket/prefix/data`` and the state store's
  blobs (snapshots, large bodies, big buffer entries) under ``s3://bucket/prefix/_statestore``,
  all through ``endpoint`` (moto, or the fault proxy in front of it).

``python -m tests.oracle.stores '<spec>' <table> <write|ingest> <request id> '<records as JSON>'``
is the writer: one buffered write of the records under the request id, or one standard
ingest of them (under the request id when ``Table.ingest`` takes one).
"""

from __future__ import annotations

import json
import sys
from typing import Any

CREDENTIALS = {"region": "us-east-1", "access_key": "test", "secret_key": "test"}


def open_sleeper(spec: dict[str, Any], endpoint: str | None = None) -> Any:
    """A Sleeper on ``spec``'s home; ``endpoint``: reach AWS through this URL instead
    (the fault proxy), or PostgreSQL through the spec's ``dsn`` as given."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore, S3Options

    if spec["backend"] == "postgres":
        from statestore.postgres import PostgresStateStore

        if spec.get("spark"):  # from a configuration, as bulk import needs
            from pathlib import Path

            from sleeper_ops.config import SleeperConfig

            raw = {"object_store": {"uri": spec["data"]}, "state_store": {"backend": "postgres", "dsn": spec["dsn"]},
                   "spark": {"master": spec["spark"]}}
            sleeper = Sleeper(config=SleeperConfig.from_dict(Path(spec["data"]).parent, raw))
            store = sleeper.state_store
        else:
            store = PostgresStateStore(spec["dsn"])
            sleeper = Sleeper(state_store=store, objects=ObjectStore(spec["data"]))
        store.connect_timeout = float(spec.get("connect_timeout", store.connect_timeout))
        if "outcome_timeout" in spec:
            store.outcome_timeout_seconds = float(spec["outcome_timeout"])
        return sleeper
    from statestore.dynamodb import open_dynamodb

    url = endpoint or spec["endpoint"]
    root = f"s3://{spec['bucket']}/{spec['prefix']}"
    store = open_dynamodb(endpoint_url=url, table_prefix=spec["table_prefix"], object_store=f"{root}/_statestore",
                          object_store_options={"endpoint_url": url, **CREDENTIALS}, retention_margin=0,
                          retention_seconds=0, **CREDENTIALS)
    if "outcome_timeout" in spec:
        store.outcome_timeout_seconds = float(spec["outcome_timeout"])
    s3 = S3Options(endpoint_override=url[len("http://"):], scheme="http", region="us-east-1", access_key="test",
                   secret_key="test")
    return Sleeper(state_store=store, objects=ObjectStore(f"{root}/data", s3))


def ingest_options(request_id: str) -> dict[str, str]:
    """``Table.ingest``'s idempotency key, when it takes one (issue 33 adds it)."""
    import inspect

    from sleeper_ops.ingest.standard import IngestRunner

    return {"request_id": request_id} if "request_id" in inspect.signature(IngestRunner.__init__).parameters else {}


def main(argv: list[str]) -> None:
    spec, table, how, request_id, records = json.loads(argv[0]), argv[1], argv[2], argv[3], json.loads(argv[4])
    with open_sleeper(spec) as s:
        if how == "write":
            s.table(table).write(records, request_id=request_id)
        else:
            import pyarrow as pa

            s.table(table).ingest(pa.Table.from_pylist(records), **ingest_options(request_id))


if __name__ == "__main__":
    main(sys.argv[1:])
