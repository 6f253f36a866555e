"""Restore a home recorded by :mod:`tests.compat.record_home` into a fresh state store:
a PostgreSQL database migrated to the recorded schema version (only the migrations the
recording had), or DynamoDB tables with the recorded keys; then its data files and
``sleeper.toml`` into a fresh home. Opening the home with today's code then migrates
or reads it as it would a user's."""

from __future__ import annotations

import base64
import graphlib
import json
import shutil
from pathlib import Path
from typing import Any

from tests.compat.record_home import HOMES


def recorded_homes(backend: str) -> list[Path]:
    """The recorded homes of ``backend``, oldest release first."""
    return sorted(p for p in HOMES.glob(f"*-{backend}") if (p / "state.json").is_file())


def load(recorded: Path, home: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copy the recording's files into ``home``; its state and manifest, ``{home}`` replaced."""
    for folder in ("data", "ingest"):
        shutil.copytree(recorded / folder, home / folder)

    def read(name: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads((recorded / name).read_text().replace("{home}", str(home)))
        return doc
    return read("state.json"), read("manifest.json")


def restore_postgres(state: dict[str, Any], dsn: str, scratch: Path) -> None:
    """Migrate the empty database at ``dsn`` to the recorded versions, then insert every
    recorded row (tables in foreign key order) and set the sequences."""
    import psycopg

    from statestore.postgres.migrate import migrate, migrations

    wanted = set(state["migrations"])
    scratch.mkdir()
    for version, path in migrations():
        if version in wanted:
            shutil.copy(path, scratch / path.name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert migrate(conn, scratch) == state["migrations"]
        _pass_transaction_ids(conn, state)
        order = graphlib.TopologicalSorter({name: set() for name in state["tables"]})
        for child, parent in conn.execute(
                "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint WHERE contype = 'f'"):
            if child in state["tables"] and parent != child:
                order.add(child, parent)
        with conn.transaction():
            for name in order.static_order():
                for row in state["tables"].get(name, ()):
                    _insert(conn, name, row)
            for seq, value in state["sequences"].items():
                if value is not None:
                    conn.execute("SELECT setval(%s, %s)", (seq, value))


def _pass_transaction_ids(conn: Any, state: dict[str, Any]) -> None:
    """Move the server's transaction ids past every one the recording holds: history
    numbers and change rows are PostgreSQL transaction ids (migrations 005, 010), which
    keep growing on the user's server across an upgrade (a restore into a younger
    server would make today's commits reuse recorded numbers)."""
    recorded = [int(r["number"]) for r in state["tables"].get("table_history", ())]
    recorded += [int(r["xid"]) for r in state["tables"].get("state_changes", ())]
    highest = max(recorded, default=0)
    while int(conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]) <= highest:
        pass


def _insert(conn: Any, table: str, row: dict[str, Any]) -> None:
    """Insert one ``row_to_json`` row: each value cast from its JSON form to its column's
    type (json as text, since a json column may hold ``\\u0000`` that jsonb refuses)."""
    types = dict(conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped", (f'"{table}"',)).fetchall())
    names = list(row)
    values = [json.dumps(row[c]) if types[c] in ("json", "jsonb") and row[c] is not None else row[c] for c in names]
    casts = ", ".join(f"%s::{types[c]}" for c in names)
    columns = ", ".join(f'"{c}"' for c in names)
    conn.execute(f'INSERT INTO "{table}" ({columns}) VALUES ({casts})', values)  # recorded names


def _item(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__b64__"}:
            return base64.b64decode(value["__b64__"])
        return {k: _item(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_item(v) for v in value]
    return value


def restore_dynamodb(state: dict[str, Any], endpoint_url: str, prefix: str) -> None:
    """Create the recorded DynamoDB tables under ``prefix`` and put every recorded item."""
    import boto3

    client = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    for role, table in state["tables"].items():
        name = prefix + role
        client.create_table(TableName=name, KeySchema=table["key_schema"], AttributeDefinitions=table["attributes"],
                            BillingMode="PAY_PER_REQUEST")
        for item in table["items"]:
            client.put_item(TableName=name, Item=_item(item))
