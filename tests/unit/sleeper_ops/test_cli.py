"""The ``sleeper`` CLI, run in process through ``sleeper_ops.cli.commands.main``.

``SLEEPER_HOME`` holds a ``sleeper.toml`` naming the in-memory state store. That
store lives only as long as its process, so the ``home`` fixture opens one Sleeper
from that configuration and has every command of the test reuse it (the
subprocess flow over PostgreSQL is in tests/integration/test_cli_postgres.py).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sleeper_ops.api
from statestore.properties import PROPERTY_DEFS
from tests.unit.sleeper_ops.cli_runner import invoke_cli

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [
        {"name": "blob", "type": "ByteArrayType"},
        {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
        {"name": "nums", "type": {"ListType": {"elementType": "LongType"}}},
    ],
}
ROWS = [
    {"key": k, "ts": ts, "blob": base64.b64encode(bytes([i, 0xFF])).decode(), "tags": {"n": i, "x": -i},
     "nums": [i, i + 1]}
    for i, (k, ts) in enumerate([("apple", 2), ("apple", 1), ("banana", 5), ("grape", 1), ("kiwi", 9),
                                 ("pear", 3), ("plum", 4), ("zucchini", 8), ("zz", 0)])
]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self):  # type: ignore[no-untyped-def]
        return json.loads(self.out)

    def jsonl(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """SLEEPER_HOME with the in-memory state store; all commands share one Sleeper built from it."""
    h = tmp_path / "home"
    h.mkdir()
    (h / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n')
    monkeypatch.setenv("SLEEPER_HOME", str(h))
    real = sleeper_ops.api.Sleeper
    shared = real(h)
    assert shared.config is not None and shared.config.state_store_backend == "memory"
    homes_seen: list[Path] = []

    def factory(given):  # type: ignore[no-untyped-def]
        homes_seen.append(Path(given))
        return contextlib.nullcontext(shared)
    monkeypatch.setattr(sleeper_ops.api, "Sleeper", factory)
    yield h
    shared.close()
    assert all(p == h for p in homes_seen), f"commands used another home: {homes_seen}"


@pytest.fixture
def run(capsys):
    def invoke(*args: str) -> Result:
        return Result(*invoke_cli(capsys, *args))
    return invoke


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "files"
    d.mkdir()
    (d / "schema.json").write_text(json.dumps(SCHEMA))
    (d / "splits.txt").write_text("g\np\n")
    (d / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return d


@pytest.fixture
def table(home, run, files):
    """Table ``t`` split at g and p, holding ROWS."""
    r = run("table", "create", "t", "--schema", str(files / "schema.json"), "--split-points", str(files / "splits.txt"))
    assert r.code == 0, r.err
    r = run("ingest", "t", str(files / "rows.jsonl"))
    assert r.code == 0, r.err
    return "t"


def ok(r: Result) -> Result:
    assert r.code == 0, f"exit {r.code}: {r.err}"
    return r


def assert_one_line_error(r: Result, *fragments: str) -> None:
    assert r.code != 0, f"expected failure, got exit 0 with {r.out!r}"
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {r.err!r}"
    assert "Traceback" not in r.err
    assert lines[0].startswith("error: "), lines[0]
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"


def expected_rows(pred=lambda r: True) -> list[dict]:  # type: ignore[no-untyped-def]
    return sorted((r for r in ROWS if pred(r)), key=lambda r: (r["key"], r["ts"]))


# ----- table ----------------------------------------------------------------------------------

def test_table_create_with_split_points_and_properties(home, run, files):
    r = ok(run("table", "create", "t", "--schema", str(files / "schema.json"), "--split-points",
               str(files / "splits.txt"), "--property", "sleeper.table.gc.delay.minutes=7",
               "--property", "sleeper.table.compaction.strategy=basic"))
    assert "3 leaf partitions" in r.out
    described = ok(run("table", "describe", "t", "--json")).json()
    assert described["properties"]["sleeper.table.gc.delay.minutes"] == "7"
    assert described["properties"]["sleeper.table.compaction.strategy"] == "basic"
    assert sorted(described["set"]) == ["sleeper.table.compaction.strategy", "sleeper.table.gc.delay.minutes"]
    assert described["schema"] == SCHEMA
    parts = ok(run("report", "partitions", "t", "--json")).json()
    leaves = [p for p in parts if p["leaf"]]
    assert len(leaves) == 3
    bounds = sorted((p["region"][0]["min"], p["region"][0]["max"] or "~") for p in leaves)
    assert bounds == [("", "g"), ("g", "p"), ("p", "~")]


def test_table_list_shows_every_table_with_its_state(home, run, files):
    for name in ("beta", "alpha"):
        ok(run("table", "create", name, "--schema", str(files / "schema.json")))
    listed = ok(run("table", "list", "--json")).json()
    assert [t["name"] for t in listed] == ["alpha", "beta"]
    assert all(t["online"] for t in listed)
    text = ok(run("table", "list")).out.splitlines()
    assert [line.split("\t")[0] for line in text] == ["alpha", "beta"]


def test_table_describe_shows_every_property_with_its_default(home, run, files):
    ok(run("table", "create", "t", "--schema", str(files / "schema.json"), "--property",
           "sleeper.table.parquet.rowgroup.rows.max=5000"))
    text = ok(run("table", "describe", "t")).out
    for name, d in PROPERTY_DEFS.items():
        if name == "sleeper.table.parquet.rowgroup.rows.max":
            assert f"* {name} = 5000" in text
        else:
            assert f"  {name} = {d.default or ''}".rstrip() in text, f"{name} missing or not its default"
    assert "sleeper.table.compaction.strategy = sizeratio" in text
    assert "sleeper.table.partition.splitting.threshold = 1000000000" in text
    props = ok(run("table", "describe", "t", "--json")).json()["properties"]
    assert set(props) == set(PROPERTY_DEFS)


def test_table_offline_and_online_flip_the_online_property(home, run, files):
    ok(run("table", "create", "t", "--schema", str(files / "schema.json")))
    ok(run("table", "offline", "t"))
    assert ok(run("table", "list", "--json")).json()[0]["online"] is False
    assert ok(run("table", "describe", "t", "--json")).json()["properties"]["sleeper.table.online"] == "false"
    ok(run("table", "online", "t"))
    assert ok(run("table", "list", "--json")).json()[0]["online"] is True


def test_an_offline_table_still_takes_ingest_and_queries(table, run, files):
    ok(run("table", "offline", table))
    ok(run("ingest", table, str(files / "rows.jsonl")))
    assert len(ok(run("query", table, "--key", '"kiwi"')).jsonl()) == 2


def test_table_rename_keeps_the_data_under_the_new_name(table, run):
    ok(run("table", "rename", table, "renamed"))
    assert [t["name"] for t in ok(run("table", "list", "--json")).json()] == ["renamed"]
    assert len(ok(run("query", "renamed", "--range", '""', "null")).jsonl()) == len(ROWS)
    assert_one_line_error(run("query", table, "--key", '"kiwi"'), "'t'")


def test_table_delete_removes_the_table_and_its_files(table, run, home):
    data_dir = home / "data"
    assert any(p.is_file() for p in data_dir.rglob("*"))
    ok(run("table", "delete", table, "--yes"))
    assert ok(run("table", "list", "--json")).json() == []
    assert [p for p in data_dir.rglob("*") if p.is_file()] == []
    assert_one_line_error(run("table", "describe", table), "does not exist")


# ----- ingest and query ----------------------------------------------------------------------

def test_ingest_reports_the_records_and_files_written(home, run, files):
    ok(run("table", "create", "t", "--schema", str(files / "schema.json"), "--split-points", str(files / "splits.txt")))
    r = ok(run("ingest", "t", str(files / "rows.jsonl")))
    assert f"ingested {len(ROWS)} records into 3 files" in r.out
    assert r.err == ""


def test_an_ingest_that_waits_too_long_for_compaction_fails_in_one_line_and_adds_nothing(table, run, files):
    # after a second ingest every leaf of t holds 2 files: over a limit of 1
    ok(run("ingest", "t", str(files / "rows.jsonl")))
    ok(run("table", "set", "t", "sleeper.table.ingest.max.files.per.leaf=1",
           "sleeper.table.ingest.max.files.wait.seconds=1"))
    r = run("ingest", "t", str(files / "rows.jsonl"))
    assert_one_line_error(r, "table t:", "holds 2 files", "sleeper.table.ingest.max.files.per.leaf = 1",
                          "sleeper.table.ingest.max.files.wait.seconds = 1", "Nothing was read or written")
    assert len(ok(run("query", "t", "--range", "null", "null")).jsonl()) == 2 * len(ROWS)
    ok(run("compact", "t"))  # one file a leaf again: the same ingest goes through
    assert "ingested" in ok(run("ingest", "t", str(files / "rows.jsonl"))).out
    assert len(ok(run("query", "t", "--range", "null", "null")).jsonl()) == 3 * len(ROWS)


def test_query_key_returns_the_records_with_that_key_as_jsonl(table, run):
    got = ok(run("query", table, "--key", '"apple"')).jsonl()
    assert got == expected_rows(lambda r: r["key"] == "apple")
    assert [r["ts"] for r in got] == [1, 2]


def test_query_range_is_min_inclusive_max_exclusive_and_null_is_unbounded(table, run):
    assert ok(run("query", table, "--range", '"banana"', '"kiwi"')).jsonl() == \
        expected_rows(lambda r: "banana" <= r["key"] < "kiwi")
    assert ok(run("query", table, "--range", '"pear"', "null")).jsonl() == expected_rows(lambda r: r["key"] >= "pear")


def test_query_several_keys_and_ranges_returns_each_record_once_in_order(table, run):
    got = ok(run("query", table, "--key", '"kiwi"', "--key", '"zz"', "--key", '"kiwi"',
                 "--range", '"a"', '"c"', "--range", '"b"', '"h"')).jsonl()
    assert got == expected_rows(lambda r: r["key"] in ("kiwi", "zz") or "a" <= r["key"] < "h")


def test_query_jsonl_writes_bytes_as_base64_and_maps_as_objects(table, run):
    (row,) = ok(run("query", table, "--key", '"banana"')).jsonl()
    assert row == ROWS[2]
    assert base64.b64decode(row["blob"]) == bytes([2, 0xFF])
    assert row["tags"] == {"n": 2, "x": -2}


def test_query_csv_output_has_a_header_and_one_row_per_record(table, run):
    out = ok(run("query", table, "--range", '"a"', "null", "--format", "csv")).out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["key"] for r in rows] == [r["key"] for r in expected_rows()]
    assert rows[0]["blob"] == ROWS[1]["blob"]
    assert json.loads(rows[0]["tags"]) == ROWS[1]["tags"]
    assert json.loads(rows[0]["nums"]) == ROWS[1]["nums"]


def test_query_to_an_output_file_in_each_format(table, run, tmp_path):
    for fmt in ("jsonl", "csv"):
        path = tmp_path / f"out.{fmt}"
        r = ok(run("query", table, "--key", '"plum"', "--format", fmt, "--output", str(path)))
        assert r.out == ""
        assert "plum" in path.read_text()


def test_query_parquet_output_keeps_every_field_with_its_schema_type(table, run, tmp_path):
    path = tmp_path / "out.parquet"
    ok(run("query", table, "--range", '""', "null", "--format", "parquet", "--output", str(path)))
    result = pq.read_table(path)
    types = {f.name: f.type for f in result.schema}
    assert types == {"key": pa.string(), "ts": pa.int64(), "blob": pa.binary(),
                     "tags": pa.map_(pa.string(), pa.int64()), "nums": pa.list_(pa.int64())}
    first = result.to_pylist()[0]
    assert first["blob"] == bytes([1, 0xFF])
    assert first["tags"] == [("n", 1), ("x", -1)]
    assert result.num_rows == len(ROWS)


def test_query_bytes_keys_are_base64_and_multi_field_keys_are_arrays(home, run, tmp_path):
    schema = {"rowKeyFields": [{"name": "id", "type": "ByteArrayType"}, {"name": "n", "type": "LongType"}],
              "valueFields": [{"name": "v", "type": "StringType"}]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    data = tmp_path / "d.csv"
    data.write_text("id,n,v\nAAE=,1,a\nAAE=,2,b\n/w==,1,c\n")
    ok(run("table", "create", "b", "--schema", str(tmp_path / "s.json")))
    ok(run("ingest", "b", str(data)))
    assert [r["v"] for r in ok(run("query", "b", "--key", '"AAE="')).jsonl()] == ["a", "b"]
    assert [r["v"] for r in ok(run("query", "b", "--key", '["AAE=", 2]')).jsonl()] == ["b"]
    assert ok(run("query", "b", "--key", '["/w==", 1]')).jsonl() == [{"id": "/w==", "n": 1, "v": "c"}]


# ----- reports --------------------------------------------------------------------------------

def test_report_partitions_json_gives_the_tree_with_record_counts(table, run):
    parts = ok(run("report", "partitions", table, "--json")).json()
    assert len(parts) == 5 and sum(p["leaf"] for p in parts) == 3
    assert sum(p["records"] for p in parts) == len(ROWS)
    by_id = {p["id"]: p for p in parts}
    for p in parts:
        if p["parent"] is not None:
            assert p["id"] in by_id[p["parent"]]["children"]
    text = ok(run("report", "partitions", table)).out
    assert f"{len(ROWS)} records" in text.splitlines()[0]


def test_report_files_json_lists_every_file_with_its_references(table, run):
    files = ok(run("report", "files", table, "--json")).json()
    # one small ingest over 3 leaves: one file shared by the leaves, a reference from each
    assert len(files) == 1 and len(files[0]["references"]) == 3
    assert sum(ref["records"] for f in files for ref in f["references"]) == len(ROWS)
    assert not any(ref["whole_file"] or ref["approximate"] for ref in files[0]["references"])
    text = ok(run("report", "files", table)).out
    assert text.splitlines()[0].startswith("1 file")


# ----- errors: one line on stderr, non-zero exit, no traceback ---------------------------------

@pytest.mark.parametrize("args", [
    ("table", "describe", "nope"), ("table", "online", "nope"), ("table", "offline", "nope"),
    ("table", "rename", "nope", "other"), ("table", "delete", "nope"), ("ingest", "nope", "x.csv"),
    ("query", "nope", "--key", '"a"'), ("report", "files", "nope"), ("report", "partitions", "nope", "--json"),
], ids=lambda a: " ".join(a))
def test_unknown_table_is_one_line_error(home, run, args):
    assert_one_line_error(run(*args), "'nope'")


def test_bad_schema_json_is_one_line_error(home, run, tmp_path):
    (tmp_path / "bad.json").write_text('{"rowKeyFields": [')
    assert_one_line_error(run("table", "create", "t", "--schema", str(tmp_path / "bad.json")), "not valid JSON")
    (tmp_path / "badtype.json").write_text(json.dumps({"rowKeyFields": [{"name": "k", "type": "FloatType"}]}))
    assert_one_line_error(run("table", "create", "t", "--schema", str(tmp_path / "badtype.json")), "FloatType")
    assert_one_line_error(run("table", "create", "t", "--schema", str(tmp_path / "missing.json")), "missing.json")
    assert ok(run("table", "list", "--json")).json() == []


def test_unknown_property_is_one_line_error_and_creates_nothing(home, run, files):
    r = run("table", "create", "t", "--schema", str(files / "schema.json"), "--property", "sleeper.table.nope=1")
    assert_one_line_error(r, "sleeper.table.nope")
    assert ok(run("table", "list", "--json")).json() == []


@pytest.mark.parametrize("prop", ["sleeper.table.gc.delay.minutes=soon", "sleeper.table.online=maybe",
                                  "sleeper.table.compaction.strategy=fastest",
                                  "sleeper.table.parquet.rowgroup.rows.max=0", "noequals"])
def test_property_value_of_the_wrong_type_is_one_line_error(home, run, files, prop):
    r = run("table", "create", "t", "--schema", str(files / "schema.json"), "--property", prop)
    assert_one_line_error(r, prop.split("=")[0])
    assert ok(run("table", "list", "--json")).json() == []


def test_bad_split_points_file_is_one_line_error(home, run, tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"rowKeyFields": [{"name": "k", "type": "LongType"}]}))
    (tmp_path / "splits.txt").write_text("10\nten\n")
    r = run("table", "create", "t", "--schema", str(tmp_path / "s.json"),
            "--split-points", str(tmp_path / "splits.txt"))
    assert_one_line_error(r, "line 2")


@pytest.mark.parametrize("args,fragment", [
    (("--key", "42"), "StringType"),
    (("--key", "abc"), "not JSON"),
    (("--key", '["a", "b"]'), "row key"),
    (("--range", "1", "null"), "StringType"),
    (("--range", '"a"', "5"), "StringType"),
    (("--range", '"k"', '"c"'), "empty"),
    ((), "--key"),
    (("--key", '"a"', "--format", "parquet"), "--output"),
], ids=["int-for-string", "not-json", "too-many-fields", "range-min-type", "range-max-type", "empty-range",
        "no-key", "parquet-to-stdout"])
def test_bad_query_is_one_line_error(table, run, args, fragment):
    assert_one_line_error(run("query", table, *args), fragment)


def test_duplicate_table_is_one_line_error(table, run, files):
    assert_one_line_error(run("table", "create", table, "--schema", str(files / "schema.json")), "already exists")


@pytest.mark.parametrize("content,name", [(None, "missing.jsonl"), ("not parquet", "bad.parquet"),
                                          ("key,ts\n", "rows.txt"), ('{"key": "a", "ts": "x"}\n', "bad.jsonl")],
                         ids=["missing", "corrupt-parquet", "unknown-extension", "bad-row"])
def test_unreadable_input_file_is_one_line_error_and_ingests_nothing(table, run, tmp_path, content, name):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    before = ok(run("report", "files", table, "--json")).json()
    assert_one_line_error(run("ingest", table, str(path)), name)
    assert ok(run("report", "files", table, "--json")).json() == before, "the failed ingest changed the table"


# ----- round trips: what query writes, ingest reads back ----------------------------------------

def test_query_jsonl_output_ingests_back_into_the_same_records(table, run, files, tmp_path):
    dump = tmp_path / "dump.jsonl"
    ok(run("query", table, "--range", '""', "null", "--output", str(dump)))
    ok(run("table", "create", "copy", "--schema", str(files / "schema.json")))
    ok(run("ingest", "copy", str(dump)))
    original = ok(run("query", table, "--range", '""', "null")).jsonl()
    assert len(original) == len(ROWS)
    assert ok(run("query", "copy", "--range", '""', "null")).jsonl() == original


def test_query_csv_output_ingests_back_into_the_same_records(home, run, tmp_path):
    schema = {"rowKeyFields": [{"name": "id", "type": "ByteArrayType"}],
              "sortKeyFields": [{"name": "n", "type": "IntType"}],
              "valueFields": [{"name": "s", "type": "StringType"}, {"name": "l", "type": "LongType"}]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    data = tmp_path / "in.csv"
    data.write_text('id,n,s,l\nAAE=,-1,"a, quoted ""one""",9223372036854775807\n/w==,2,é,-5\n,0,,0\n')
    for name in ("orig", "copy"):
        ok(run("table", "create", name, "--schema", str(tmp_path / "s.json")))
    ok(run("ingest", "orig", str(data)))
    dump = tmp_path / "dump.csv"
    ok(run("query", "orig", "--range", '""', "null", "--format", "csv", "--output", str(dump)))
    ok(run("ingest", "copy", str(dump)))
    original = ok(run("query", "orig", "--range", '""', "null")).jsonl()
    assert [r["s"] for r in original] == ["", "a, quoted \"one\"", "é"]
    assert ok(run("query", "copy", "--range", '""', "null")).jsonl() == original


# ----- maintenance commands -------------------------------------------------------------

def test_split_compact_gc_and_jobs_report(table, run, home):
    for _ in range(2):
        ok(run("ingest", "t", str(home.parent / "files" / "rows.jsonl")))
    ok(run("table", "set", "t", "sleeper.table.compaction.strategy=basic", "sleeper.table.gc.delay.minutes=1"))
    out = ok(run("compact", "t", "--runner", "local")).out
    assert "committed" in out and "0 failed" in out
    out = ok(run("gc", "t", "--dry-run")).out
    assert "would delete" in out or "dry run" in out
    assert "deleted" in ok(run("gc", "t")).out
    assert "split" in ok(run("split", "t")).out
    jobs = ok(run("report", "jobs", "t", "--json")).json()
    # every ingest is a job too (it names its outputs before writing them)
    assert jobs and {j["kind"] for j in jobs} == {"compaction", "ingest"}
    assert {j["status"] for j in jobs} == {"committed"}
    assert "compaction  committed" in ok(run("report", "jobs", "t")).out


def test_maintenance_refuses_while_another_run_holds_the_lease(table, run, home):
    import sleeper_ops.api

    s = sleeper_ops.api.Sleeper(str(home)).__enter__()
    t = s.table("t")
    with t.exclusive("compaction", "airflow/sleeper_t_compaction/run-1"):
        assert_one_line_error(run("compact", "t"), "held by airflow/sleeper_t_compaction/run-1")
        ok(run("gc", "t"))  # other operations have their own leases
    ok(run("compact", "t"))


def test_help_lists_every_command_including_those_loaded_on_use(capsys: pytest.CaptureFixture[str]) -> None:
    """The commands in modules of their own (table, server, delete, cluster) are imported
    only when used, yet ``--help`` lists them and each runs its own ``--help``."""
    from sleeper_ops.cli.commands import LAZY_SUBCOMMANDS

    code, out, _ = invoke_cli(capsys, "--help")
    assert code == 0
    listed = {line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()}
    assert set(LAZY_SUBCOMMANDS) | {"query", "ingest", "compact", "sql"} <= listed
    for name in LAZY_SUBCOMMANDS:
        code, out, _ = invoke_cli(capsys, name, "--help")
        assert code == 0 and f"Usage: sleeper {name}" in out, out
