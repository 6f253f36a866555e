"""The ``sleeper`` command on S3 + DynamoDB with no PostgreSQL: one process per command,
``[state_store] backend = "dynamodb"`` and an ``s3://`` object store, both on one moto
server on 127.0.0.1 (snapshots and large transactions go to the object store's
``_statestore`` prefix, the default)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.integration.statestore.conftest import serial_moto_server

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).with_name("sleeper"))
BUCKET = "sleeper-cli-data"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "n", "type": "LongType"}]}


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    """``127.0.0.1:PORT`` of a moto server with the data bucket (one request at a time:
    see :func:`~tests.integration.statestore.conftest.serial_moto_server`)."""
    boto3 = pytest.importorskip("boto3")
    with serial_moto_server() as url:
        boto3.client("s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield url[len("http://"):]


def sleeper_toml(moto: str, data_prefix: str, table_prefix: str, bucket: str = BUCKET) -> str:
    """A ``sleeper.toml`` keeping data under ``s3://<bucket>/<data_prefix>`` and the state in
    DynamoDB tables named ``<table_prefix>...``, both on the moto server at ``moto``."""
    return f"""
[object_store]
uri = "s3://{bucket}/{data_prefix}"
endpoint_override = "{moto}"
scheme = "http"
region = "us-east-1"
access_key = "test"
secret_key = "test"

[state_store]
backend = "dynamodb"
endpoint_url = "http://{moto}"
region = "us-east-1"
table_prefix = "{table_prefix}"
access_key = "test"
secret_key = "test"
"""


@pytest.fixture(scope="module")
def sleeper(moto: str, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("sleeper-dynamodb-home")
    (home / "sleeper.toml").write_text(sleeper_toml(moto, "cli", "cli-"))
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_STATE_STORE_DSN"}
    env.update(SLEEPER_HOME=str(home), AWS_EC2_METADATA_DISABLED="true")

    def run(*args: str) -> str:
        p = subprocess.run([SLEEPER, *args], env=env, cwd=home, capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, f"sleeper {' '.join(args)}: exit {p.returncode}: {p.stderr}"
        return p.stdout
    run.home = home  # type: ignore[attr-defined]
    return run


def test_the_cli_runs_on_s3_and_dynamodb_without_postgres(sleeper, moto):
    home: Path = sleeper.home
    (home / "schema.json").write_text(json.dumps(SCHEMA))
    for i in range(3):
        (home / f"rows{i}.jsonl").write_text("".join(json.dumps({"key": f"k{j:03d}", "n": i}) + "\n"
                                                     for j in range(i, 60, 3)))
    out = sleeper("table", "create", "events", "--schema", str(home / "schema.json"),
                  "--property", "sleeper.table.partition.splitting.threshold=30",
                  "--property", "sleeper.table.gc.delay.minutes=1",
                  "--property", "sleeper.table.compaction.strategy=basic")
    table_id = out.split("(")[1].split(")")[0]
    assert [t["name"] for t in json.loads(sleeper("table", "list", "--json"))] == ["events"]
    for i in range(3):
        sleeper("ingest", "events", str(home / f"rows{i}.jsonl"))

    def rows(*args: str) -> list[dict]:
        return [json.loads(line) for line in sleeper("query", "events", *args).splitlines() if line.strip()]

    assert len(rows("--range", '""', "null")) == 60
    sleeper("split", "events")
    parts = json.loads(sleeper("report", "partitions", "events", "--json"))
    assert sum(p["leaf"] for p in parts) == 2, parts

    sleeper("compact", "events")
    files = json.loads(sleeper("report", "files", "events", "--json"))
    referenced = [f for f in files if f["references"]]
    assert sum(r["records"] for f in referenced for r in f["references"]) == 60
    assert len(referenced) <= 2, "each leaf compacted into one file"
    assert [r["key"] for r in rows("--key", '"k007"')] == ["k007"]
    assert len(rows("--range", '""', "null")) == 60

    sleeper("gc", "events")  # deletes nothing yet (the inputs are younger than the delay); prunes the log
    # The GC delay has a floor of a minute and the log cannot be aged: judge the ages an
    # hour ahead, through the library on the same configuration.
    from sleeper_ops import Sleeper

    with Sleeper(home) as s:
        report = s.table("events").gc(now_ms=int(time.time() * 1000) + 3_600_000)
    assert len(report.deleted) == len(files) - len(referenced) > 0, report.summary()
    files = json.loads(sleeper("report", "files", "events", "--json"))
    assert files and all(f["references"] for f in files), "gc forgot the compacted inputs"
    assert len(rows("--range", '""', "null")) == 60

    # The state lives in DynamoDB and the object store: a log and no PostgreSQL anywhere.
    import boto3

    dynamo = boto3.client("dynamodb", endpoint_url=f"http://{moto}", aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
    for name in ("cli-catalog", "cli-log", "cli-items"):
        assert dynamo.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE"
    logged = dynamo.query(TableName="cli-log", KeyConditionExpression="table_id = :t",
                          ExpressionAttributeValues={":t": {"S": table_id}})["Items"]
    assert len(logged) >= 6
    assert not (home / "pg").exists()

    sleeper("table", "delete", "events", "--yes")
    assert json.loads(sleeper("table", "list", "--json")) == []


def test_a_home_that_asks_for_group_commit_commits_through_it(moto: str, tmp_path: Path) -> None:
    """``[state_store] group_commit = true`` (the default) reaches the store: two
    writers' ingests, committing by themselves or through pending requests as they meet
    (docs/adr/0010), land every record once."""
    import threading

    import pyarrow as pa

    from sleeper_ops import Sleeper

    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(sleeper_toml(moto, "group", "group-") + "group_commit = true\n")
    schema = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
              "valueFields": [{"name": "n", "type": "LongType"}]}
    with Sleeper(home) as setup:
        assert setup.state_store.group_commit is True
        setup.create_table("g", schema)
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            with Sleeper(home) as s:
                for i in range(3):
                    keys = [f"w{w}-{i}-{j:03d}" for j in range(100)]
                    s.table("g").ingest(pa.table({"key": keys, "n": pa.array(range(100), pa.int64())}))
        except BaseException as e:
            errors.append(e)
    writers = [threading.Thread(target=write, args=(w,)) for w in range(2)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    assert errors == []
    with Sleeper(home) as s:
        keys = s.table("g").query(ranges=[("", None)]).column("key").to_pylist()
    assert len(keys) == 600 and len(set(keys)) == 600
