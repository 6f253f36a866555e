"""The erasure oracle's raw scan (tests/oracle/raw_scan.py) finds needles in the stores
it dumps: a PostgreSQL bytea holding an Arrow IPC stream, zlib JSON and undecodable
bytes, a json column, a table in a schema of its own; DynamoDB items' compressed binary
attributes, string attributes and nested maps; objects in an S3 bucket (moto)."""

from __future__ import annotations

import json
import uuid
import zlib

import pyarrow as pa
import pytest

from tests.integration.statestore.conftest import MOTO_CREDENTIALS
from tests.integration.statestore.conftest import moto_endpoint_url as moto_endpoint_url
from tests.oracle.formats import Needles
from tests.oracle.raw_scan import DynamoPlace, Places, S3Place, raw_scan

pytestmark = pytest.mark.integration

NEEDLE = "bob.erased@example.org"
KEYS = [f"user{i:05d}@example.org" for i in range(3000)]


def _arrow_stream(keys: list[str]) -> bytes:
    table = pa.table({"key": keys})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_finds_needles_in_every_column_of_every_postgresql_table(pg_empty_dsn: str) -> None:
    import psycopg

    ipc = _arrow_stream([*KEYS[:10], NEEDLE, *KEYS[10:]])
    assert not Needles([NEEDLE]).search(ipc)
    with psycopg.connect(pg_empty_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE buffer (id int PRIMARY KEY, data bytea)")
        conn.execute("CREATE SCHEMA audit")
        conn.execute("CREATE TABLE audit.log (id int, body json, undo bytea, note text)")
        conn.execute("INSERT INTO buffer VALUES (1, %s), (2, %s)", [ipc, _arrow_stream(KEYS[:5])])
        conn.execute("INSERT INTO audit.log VALUES (1, %s, %s, 'x'), (2, '{}', %s, %s)", [
            json.dumps({"detail": f"delete 1: key in ['{NEEDLE}']"}),
            zlib.compress(json.dumps({"before": [{"min": NEEDLE}]}).encode()),
            b"\x00\x01undecodable" + NEEDLE.encode(), "plain"])

    result = raw_scan(Places(postgres_dsn=pg_empty_dsn), [NEEDLE, "nobody@example.org"])

    assert sorted({(h.where, h.how) for h in result.found(NEEDLE)}) == [
        ("postgres:audit.log[0]", "row as text"),
        ("postgres:audit.log[0].body", "json"),
        ("postgres:audit.log[0].undo", "bytea>zlib"),
        ("postgres:audit.log[0].undo", "bytea>zlib>json"),
        ("postgres:audit.log[1]", "row as text"),  # bytea as hex
        ("postgres:audit.log[1].undo", "bytea"),
        ("postgres:public.buffer[0].data", "bytea>arrow-stream.key"),
    ]
    assert result.found("nobody@example.org") == []
    assert result.rows == 4


def test_finds_needles_in_dynamodb_items_and_s3_objects(moto_endpoint_url: str) -> None:
    import boto3

    aws = {"endpoint_url": moto_endpoint_url, "region_name": "us-east-1",
           "aws_access_key_id": MOTO_CREDENTIALS["access_key"], "aws_secret_access_key": MOTO_CREDENTIALS["secret_key"]}
    prefix = f"scan{uuid.uuid4().hex[:8]}-"
    ddb = boto3.client("dynamodb", **aws)
    for name in ("log", "other"):
        ddb.create_table(TableName=prefix + name, BillingMode="PAY_PER_REQUEST",
                         KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                         AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}])
    body = zlib.compress(json.dumps({"regions": [{"min": [NEEDLE]}]}).encode(), 1)
    ddb.put_item(TableName=prefix + "log", Item={"pk": {"S": "t1#1"}, "body": {"B": body}})
    ddb.put_item(TableName=prefix + "log", Item={"pk": {"S": "t1#2"}, "summary": {"M": {
        "detail": {"L": [{"S": f"delete 1: key in ['{NEEDLE}']"}]}}}})
    ddb.put_item(TableName=prefix + "other", Item={"pk": {"S": "x"}, "data": {"B": _arrow_stream(KEYS[:50])}})
    ddb.put_item(TableName=prefix + "other", Item={"pk": {"S": "y"}, "blob": {"B": _arrow_stream([NEEDLE])}})
    s3 = boto3.client("s3", **aws)
    bucket = prefix.rstrip("-")
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="home/_statestore/t1/buffer/7.arrow", Body=_arrow_stream([*KEYS, NEEDLE]))
    s3.put_object(Bucket=bucket, Key="home/data/clean.arrow", Body=_arrow_stream(KEYS))
    s3.put_object(Bucket=bucket, Key="elsewhere/x.json", Body=json.dumps([NEEDLE]).encode())

    creds = {"region": "us-east-1", "access_key": "test", "secret_key": "test"}
    result = raw_scan(Places(dynamodb=[DynamoPlace(prefix, moto_endpoint_url, **creds)],
                             s3=[S3Place(bucket, "home/", moto_endpoint_url, **creds)]), [NEEDLE])

    assert sorted({(h.where, h.how) for h in result.found(NEEDLE)}) == [
        (f"dynamodb:{prefix}log{{pk=t1#1}}.body", "binary>zlib"),
        (f"dynamodb:{prefix}log{{pk=t1#1}}.body", "binary>zlib>json"),
        (f"dynamodb:{prefix}log{{pk=t1#2}}.summary.detail[0]", "string"),
        (f"dynamodb:{prefix}other{{pk=y}}.blob", "binary"),  # one key: stored uncompressed
        (f"dynamodb:{prefix}other{{pk=y}}.blob", "binary>arrow-stream.key"),
        (f"s3://{bucket}/home/_statestore/t1/buffer/7.arrow", "arrow-stream.key"),
    ]
    assert (result.items, result.objects) == (4, 2)
