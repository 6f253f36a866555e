"""The ``sleeper`` command as users run it: one process per command, state in the embedded
PostgreSQL under ``SLEEPER_HOME`` (the default configuration), data under ``SLEEPER_HOME/data``.

The first test starts from an empty home, so its command writes the default
configuration and starts (then stops) the server itself. The others keep that server
running for the module, so each command joins it rather than starting it anew.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statestore.properties import PROPERTY_DEFS

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).with_name("sleeper"))

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [
        {"name": "blob", "type": "ByteArrayType"},
        {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
        {"name": "nums", "type": {"ListType": {"elementType": "LongType"}}},
    ],
}
ARROW = pa.schema([("key", pa.string()), ("ts", pa.int64()), ("blob", pa.binary()),
                   ("tags", pa.map_(pa.string(), pa.int64())), ("nums", pa.list_(pa.int64()))])
JSONL_ROWS = [{"key": k, "ts": i, "blob": base64.b64encode(bytes([i, 0xFE])).decode(), "tags": {"i": i},
               "nums": [i, -i]} for i, k in enumerate(["apple", "banana", "grape", "kiwi", "pear", "zebra"])]
PARQUET_ROWS = [{"key": k, "ts": 100 + i, "blob": bytes([0xFF, i]), "tags": [("p", i)], "nums": []}
                for i, k in enumerate(["apple", "cherry", "mango", "pear"])]


@dataclass
class Result:
    code: int
    out: str
    err: str


def assert_one_line_error(r: Result, *fragments: str) -> None:
    assert r.code != 0, f"expected failure, got exit 0 with {r.out!r}"
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {r.err!r}"
    assert "Traceback" not in r.err and lines[0].startswith("error: "), r.err
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """An empty SLEEPER_HOME. As root, the embedded server runs as its own user, and pytest
    resets /tmp/pytest-of-root to mode 0700 whenever any pytest session starts (locking a
    running server out of its files), so then the home is made outside pytest's root."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        h = Path(tempfile.mkdtemp(prefix="sleeper-cli-home-"))
        h.chmod(0o755)
        yield h
        shutil.rmtree(h, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("sleeper-home")


@pytest.fixture(scope="module")
def sleeper(home):
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_STATE_STORE_DSN"}
    env["SLEEPER_HOME"] = str(home)

    def run(*args: str) -> Result:
        p = subprocess.run([SLEEPER, *args], env=env, cwd=home, capture_output=True, text=True, timeout=120)
        return Result(p.returncode, p.stdout, p.stderr)
    return run


@pytest.fixture(scope="module")
def inputs(home):
    d = home / "inputs"
    d.mkdir()
    (d / "schema.json").write_text(json.dumps(SCHEMA))
    (d / "splits.txt").write_text("c\nm\n")
    (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in JSONL_ROWS))
    pq.write_table(pa.Table.from_pylist(PARQUET_ROWS, schema=ARROW), d / "rows.parquet")
    return d


def ok(r: Result) -> Result:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


def jsonl(r: Result) -> list[dict]:
    return [json.loads(line) for line in ok(r).out.splitlines() if line.strip()]


def test_first_command_writes_the_default_config_and_starts_the_embedded_postgres(sleeper, home):
    if not Path(SLEEPER).exists():
        pytest.fail(f"{SLEEPER} is not installed (pip install -e .)")
    assert not (home / "sleeper.toml").exists()
    r = ok(sleeper("table", "list", "--json"))
    assert json.loads(r.out) == []
    config = (home / "sleeper.toml").read_text()
    assert 'backend = "postgres"' in config and 'dsn = ""' in config
    assert (home / "pg" / "PG_VERSION").is_file()


@pytest.fixture(scope="module")
def running_postgres(home, sleeper):
    """The home's embedded server, kept running for the module's commands to join."""
    from statestore.postgres.embedded import EmbeddedPostgres

    ok(sleeper("table", "list"))  # writes the configuration and initialises the data directory if needed
    pg = EmbeddedPostgres(home / "pg")
    pg.start()
    yield pg
    pg.stop()


def test_full_cli_flow_over_the_embedded_postgres(sleeper, running_postgres, inputs, home, tmp_path):
    r = ok(sleeper("table", "create", "events", "--schema", str(inputs / "schema.json"),
                   "--split-points", str(inputs / "splits.txt"), "--property", "sleeper.table.gc.delay.minutes=2"))
    assert "3 leaf partitions" in r.out
    table_id = r.out.split("(")[1].split(")")[0]

    # The catalog persists across processes.
    listed = json.loads(ok(sleeper("table", "list", "--json")).out)
    assert ("events", True, table_id) in [(t["name"], t["online"], t["id"]) for t in listed]
    described = ok(sleeper("table", "describe", "events")).out
    for name in PROPERTY_DEFS:
        assert name in described, f"describe does not show {name}"
    assert "* sleeper.table.gc.delay.minutes = 2" in described
    assert "  sleeper.table.compaction.strategy = sizeratio" in described

    # Ingest in two processes: JSON Lines, then Parquet.
    assert "ingested 6 records into 3 files" in ok(sleeper("ingest", "events", str(inputs / "rows.jsonl"))).out
    assert "ingested 4 records" in ok(sleeper("ingest", "events", str(inputs / "rows.parquet"))).out

    apples = jsonl(sleeper("query", "events", "--key", '"apple"'))
    assert [(r["ts"], r["blob"]) for r in apples] == [(0, JSONL_ROWS[0]["blob"]),
                                                      (100, base64.b64encode(b"\xff\x00").decode())]
    assert apples[0]["tags"] == {"i": 0} and apples[1]["tags"] == {"p": 0}
    ranged = jsonl(sleeper("query", "events", "--range", '"b"', '"l"'))
    assert [r["key"] for r in ranged] == ["banana", "cherry", "grape", "kiwi"]
    several = jsonl(sleeper("query", "events", "--key", '"pear"', "--range", '"m"', "null", "--range", '"k"', '"n"'))
    assert [(r["key"], r["ts"]) for r in several] == [("kiwi", 3), ("mango", 102), ("pear", 4), ("pear", 103),
                                                      ("zebra", 5)]
    text = ok(sleeper("query", "events", "--range", '""', "null", "--format", "csv")).out
    assert [r["key"] for r in csv.DictReader(io.StringIO(text))] == \
        ["apple", "apple", "banana", "cherry", "grape", "kiwi", "mango", "pear", "pear", "zebra"]

    out = tmp_path / "all.parquet"
    ok(sleeper("query", "events", "--range", '""', "null", "--format", "parquet", "--output", str(out)))
    table = pq.read_table(out)
    assert {f.name: f.type for f in table.schema} == {f.name: f.type for f in ARROW}
    assert table.num_rows == 10
    assert table.to_pylist()[1]["blob"] == b"\xff\x00" and table.to_pylist()[1]["tags"] == [("p", 0)]

    parts = json.loads(ok(sleeper("report", "partitions", "events", "--json")).out)
    assert sum(p["leaf"] for p in parts) == 3 and sum(p["records"] for p in parts) == 10
    files = json.loads(ok(sleeper("report", "files", "events", "--json")).out)
    # two ingests over 3 leaves: each one file shared by the leaves, referenced from each
    assert len(files) == 2 and sum(len(f["references"]) for f in files) == 6
    assert sum(ref["records"] for f in files for ref in f["references"]) == 10

    def online() -> bool:
        return {t["name"]: t["online"] for t in json.loads(ok(sleeper("table", "list", "--json")).out)}["events"]
    ok(sleeper("table", "offline", "events"))
    assert online() is False
    ok(sleeper("table", "online", "events"))
    assert online() is True

    ok(sleeper("table", "rename", "events", "renamed"))
    assert len(jsonl(sleeper("query", "renamed", "--key", '"pear"'))) == 2
    assert_one_line_error(sleeper("query", "events", "--key", '"pear"'), "'events'")

    assert (home / "data" / table_id).is_dir()
    ok(sleeper("table", "delete", "renamed", "--yes"))
    assert "renamed" not in [t["name"] for t in json.loads(ok(sleeper("table", "list", "--json")).out)]
    assert [p for p in (home / "data" / table_id).rglob("*") if p.is_file()] == []


@pytest.fixture(scope="module")
def small_table(sleeper, running_postgres, inputs, home):
    """Table ``small`` with the JSON Lines rows, and its files report."""
    (home / "bad-schema.json").write_text('{"rowKeyFields": [')
    (home / "notes.txt").write_text("key\napple\n")
    ok(sleeper("table", "create", "small", "--schema", str(inputs / "schema.json")))
    ok(sleeper("ingest", "small", str(inputs / "rows.jsonl")))
    files = json.loads(ok(sleeper("report", "files", "small", "--json")).out)
    assert len(files) == 1
    return "small", files


@pytest.mark.parametrize("args,fragment", [
    (("table", "describe", "nope"), "'nope'"),
    (("ingest", "nope", "rows.jsonl"), "'nope'"),
    (("query", "nope", "--key", '"a"'), "'nope'"),
    (("report", "partitions", "nope", "--json"), "'nope'"),
    (("table", "create", "x", "--schema", "bad-schema.json"), "not valid JSON"),
    (("table", "create", "x", "--schema", "inputs/schema.json", "--property", "sleeper.table.nope=1"),
     "sleeper.table.nope"),
    (("table", "create", "x", "--schema", "inputs/schema.json", "--property", "sleeper.table.online=perhaps"),
     "sleeper.table.online"),
    (("query", "small", "--key", "42"), "StringType"),
    (("query", "small", "--key", "not-json"), "not JSON"),
    (("ingest", "small", "inputs/missing.parquet"), "missing.parquet"),
    (("ingest", "small", "notes.txt"), "unknown file type"),
], ids=["describe-unknown", "ingest-unknown", "query-unknown", "report-unknown", "bad-schema-json",
        "unknown-property", "wrong-type-property", "wrong-type-key", "key-not-json", "missing-input",
        "unknown-extension"])
def test_errors_exit_non_zero_with_one_line_and_change_nothing(sleeper, small_table, args, fragment):
    name, files_before = small_table
    assert_one_line_error(sleeper(*args), fragment)
    assert [t["name"] for t in json.loads(ok(sleeper("table", "list", "--json")).out)] == [name]
    assert json.loads(ok(sleeper("report", "files", name, "--json")).out) == files_before


def test_a_table_holding_a_broken_iterator_fails_its_queries_in_one_line_and_can_be_fixed(
        sleeper, running_postgres, inputs):
    """The iterator was stored before properties were checked when set (the CLI now refuses
    it: its module is not in iterators.python_modules, which this home leaves empty); ``sql``
    fails with one line and no native-library noise at exit, never importing the module."""
    from statestore.postgres.store import PostgresStateStore

    prop = "sleeper.table.iterator.python"
    assert_one_line_error(sleeper("table", "create", "broken", "--schema", str(inputs / "schema.json"),
                                  "--property", f"{prop}=nosuchmod:fn"), "module 'nosuchmod' is not allowed")
    ok(sleeper("table", "create", "broken", "--schema", str(inputs / "schema.json")))
    ok(sleeper("ingest", "broken", str(inputs / "rows.jsonl")))
    store = PostgresStateStore(running_postgres.dsn)
    try:
        store.update_properties("broken", {prop: "nosuchmod:fn"})
    finally:
        store.close()
    assert f"* {prop} = nosuchmod:fn" in ok(sleeper("table", "describe", "broken")).out
    fix = f"sleeper table unset broken {prop}"
    assert_one_line_error(sleeper("sql", "SELECT count(*) AS n FROM broken"), f"table 'broken': {prop}=", fix)
    assert_one_line_error(sleeper("query", "broken", "--key", '"kiwi"'), "module 'nosuchmod' is not allowed", fix)
    ok(sleeper("table", "unset", "broken", prop))
    assert jsonl(sleeper("sql", "SELECT count(*) AS n FROM broken")) == [{"n": len(JSONL_ROWS)}]
    ok(sleeper("table", "delete", "broken", "--yes"))
