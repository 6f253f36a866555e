"""Record a small Sleeper home with this release's own API, for the compatibility test of
the next release (tests/integration/test_previous_release_home.py).

    python -m tests.compat.record_home --release 74491ea --backend postgres
    python -m tests.compat.record_home --release 74491ea --backend dynamodb

writes ``tests/compat/homes/<release>-<backend>/``: the data files (``data/``: Parquet
files with their sketches; on DynamoDB also the state store's blobs under
``data/_statestore``), ``state.json`` (the state store, portable: every row of each of
our PostgreSQL tables as JSON with the schema migration versions applied, or every item
of each DynamoDB table with the table's keys) and ``manifest.json`` (what was recorded,
for the test to assert). The home's absolute path is written ``{home}`` in state.json.

What the home holds (one table ``events``, three leaves split at ``g`` and ``p``):
ingested files, a committed compaction job (its inputs left unreferenced for GC), a
delete of ``kiwi`` (a tombstone), an unflushed buffered write with a client request id,
a queued ingest request, and the history of every transaction. A recording is
re-run only for a new release's home: an old home is never recorded again.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

HOMES = Path(__file__).resolve().parent / "homes"
TABLE = "events"
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "count", "type": "LongType"}]}
SPLIT_POINTS = ["g", "p"]
PROPERTIES = {"sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "2"}
#: ingested in two calls (two files in each leaf they touch: what the compaction merges)
INGEST_1 = [{"key": "apple", "count": 1}, {"key": "kiwi", "count": 2}, {"key": "plum", "count": 3}]
INGEST_2 = [{"key": "banana", "count": 4}, {"key": "lemon", "count": 5}, {"key": "zucchini", "count": 6}]
#: ingested after the compaction (a second file beside the compacted one in its leaf)
INGEST_3 = [{"key": "cherry", "count": 7}, {"key": "quince", "count": 8}]
DELETED_KEY = "kiwi"
#: written to the buffer after the delete, with a request id, and left unflushed
BUFFERED = [{"key": "fig", "count": 9}, {"key": "kiwi", "count": 10}]
WRITE_REQUEST_ID = "compat-write-1"
QUEUED = [{"key": "mango", "count": 11}]
#: DynamoDB: a snapshot after this many transactions (so the home holds one)
SNAPSHOT_EVERY = 4


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def build(sleeper: Any, home: Path) -> dict[str, Any]:
    """Make the home's table and history through the facade; returns the manifest."""
    s = sleeper
    s.create_table(TABLE, SCHEMA, split_points=SPLIT_POINTS, properties=PROPERTIES)
    t = s.table(TABLE)
    inputs = home / "inputs"
    inputs.mkdir()
    t.ingest([_jsonl(inputs / "ingest-1.jsonl", INGEST_1)])
    t.ingest([_jsonl(inputs / "ingest-2.jsonl", INGEST_2)])
    compaction = t.compact(run_id="compat-record")
    t.ingest([_jsonl(inputs / "ingest-3.jsonl", INGEST_3)])
    deleted = t.delete(keys=[DELETED_KEY])
    write = t.write(BUFFERED, request_id=WRITE_REQUEST_ID)
    (home / "ingest").mkdir()
    queued = t.ingest_request([_jsonl(home / "ingest" / "queued.jsonl", QUEUED)])
    jobs = t.jobs()
    history = t.history(limit=100)
    return {
        "table": TABLE, "table_id": t.info.table_id, "split_points": SPLIT_POINTS,
        "compaction_jobs": sorted(j.job_id for j in jobs if j.kind == "compaction"),
        "jobs": {j.job_id: [j.kind, j.status] for j in jobs},
        "compacted": str(compaction)[:200],
        "delete": str(deleted)[:200],
        "write_seq": write.seq,
        "ingest_requests": [r.request_id for r in queued],
        "history": [[h.number, h.kind, h.files_added, h.files_removed, h.records_added, h.records_removed]
                    for h in history],
        "references": sorted([r.filename, r.partition_id, r.record_count] for r in t.state().references.values()),
        "files": sorted(t.state().files),
    }


# ----- PostgreSQL ----------------------------------------------------------------------
def dump_postgres(dsn: str) -> dict[str, Any]:
    """Every row of each of our tables (``row_to_json``: bytea as ``\\x`` hex), the
    migration versions applied and the sequences' last values."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        names = [r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations' "
            "ORDER BY tablename")]
        tables = {}
        for name in names:
            rows = conn.execute(f'SELECT row_to_json(t) FROM "{name}" t').fetchall()  # our table names
            tables[name] = sorted((r[0] for r in rows), key=lambda r: json.dumps(r, sort_keys=True))
        sequences = {r[0]: r[1] for r in conn.execute(
            "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public' ORDER BY 1")}
    return {"backend": "postgres", "migrations": versions, "sequences": sequences, "tables": tables}


@contextlib.contextmanager
def postgres_home(home: Path) -> Iterator[tuple[Any, Any]]:
    """The default home: data under ``data``, the embedded PostgreSQL under ``pg``."""
    from sleeper_ops import Sleeper

    with Sleeper(home) as s:
        yield s, lambda: dump_postgres(s.state_store.dsn)


# ----- DynamoDB ------------------------------------------------------------------------
def _portable_value(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _portable_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_portable_value(x) for x in v]
    if isinstance(v, (bytes, bytearray)):
        return {"__b64__": base64.b64encode(bytes(v)).decode("ascii")}
    return v


def dump_dynamodb(endpoint_url: str, prefix: str) -> dict[str, Any]:
    """Every item of each of the store's DynamoDB tables (typed attribute values,
    binary as ``{"__b64__": ...}``), with each table's keys, the prefix stripped."""
    import boto3

    client = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    tables = {}
    for name in sorted(client.list_tables()["TableNames"]):
        if not name.startswith(prefix):
            continue
        desc = client.describe_table(TableName=name)["Table"]
        items: list[Any] = []
        for page in client.get_paginator("scan").paginate(TableName=name):
            items.extend(_portable_value(i) for i in page["Items"])
        items.sort(key=lambda i: json.dumps(i, sort_keys=True))
        tables[name[len(prefix):]] = {"key_schema": desc["KeySchema"],
                                      "attributes": desc["AttributeDefinitions"], "items": items}
    return {"backend": "dynamodb", "tables": tables}


@contextlib.contextmanager
def dynamodb_home(home: Path) -> Iterator[tuple[Any, Any]]:
    """A home on DynamoDB (a moto server of this process) with a local object store:
    the state store's blobs under ``data/_statestore``."""
    from sleeper_ops import Sleeper
    from tests.integration.statestore.conftest import serial_moto_server

    prefix = "compat-"
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # not a line per request
    with serial_moto_server() as url:
        (home / "sleeper.toml").write_text(
            '[object_store]\nuri = "data"\n\n[state_store]\nbackend = "dynamodb"\n'
            f'endpoint_url = "{url}"\nregion = "us-east-1"\ntable_prefix = "{prefix}"\n'
            'access_key = "test"\nsecret_key = "test"\n')
        with Sleeper(home) as s:
            s.state_store.snapshot_every = SNAPSHOT_EVERY  # a snapshot among the log's transactions
            yield s, lambda: dump_dynamodb(url, prefix)


def record(release: str, backend: str, out: Path = HOMES) -> Path:
    """Record the home of ``release`` on ``backend`` into ``out/<release>-<backend>``."""
    target = out / f"{release}-{backend}"
    if target.exists():
        raise SystemExit(f"{target} exists: a release's home is recorded once")
    with tempfile.TemporaryDirectory(prefix="sleeper-compat-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        opener = postgres_home if backend == "postgres" else dynamodb_home
        with opener(home) as (sleeper, dump):
            manifest = build(sleeper, home)
            state = dump()
        text = json.dumps(state, indent=1, sort_keys=True).replace(str(home), "{home}")
        target.mkdir(parents=True)
        (target / "state.json").write_text(text + "\n")
        manifest.update(release=release, backend=backend)
        (target / "manifest.json").write_text(
            json.dumps(manifest, indent=1, sort_keys=True).replace(str(home), "{home}") + "\n")
        shutil.copytree(home / "data", target / "data")
        shutil.copytree(home / "ingest", target / "ingest")
    return target


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--release", required=True, help="the release's name (a tag or commit)")
    p.add_argument("--backend", choices=("postgres", "dynamodb"), required=True)
    args = p.parse_args(argv)
    print(record(args.release, args.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
