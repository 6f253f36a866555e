"""``sleeper sql`` end to end, in process: output formats as for ``sleeper query``,
EXPLAIN as text, and one-line errors (exit 1, no traceback).

As in test_cli.py, ``SLEEPER_HOME`` names the in-memory state store and every command
of a test shares one Sleeper opened from it.
"""

from __future__ import annotations

import csv
import io
import json

import pyarrow.parquet as pq
import pytest

import sleeper_ops.api
from tests.unit.sleeper_ops.cli_runner import run_cli

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "blob", "type": "ByteArrayType"}, {"name": "n", "type": "LongType"}]}
ROWS = [{"key": k, "ts": i, "blob": "AP8=", "n": i} for i, k in enumerate(
    ["apple", "apple", "banana", "grape", "kiwi", "pear", "plum", "zucchini"])]


@pytest.fixture
def run(tmp_path, monkeypatch, capsys):
    """Runs ``sleeper ARGS...`` against a home holding table ``t`` (split at g and p, ROWS
    ingested); returns (exit code, stdout, stderr)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n')
    monkeypatch.setenv("SLEEPER_HOME", str(home))
    shared = sleeper_ops.api.Sleeper(home)

    def invoke(*args: str) -> tuple[int, str, str]:
        return run_cli(shared, monkeypatch, capsys, *args)

    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "splits.txt").write_text("g\np\n")
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert invoke("table", "create", "t", "--schema", str(tmp_path / "schema.json"),
                  "--split-points", str(tmp_path / "splits.txt"))[0] == 0
    assert invoke("ingest", "t", str(tmp_path / "rows.jsonl"))[0] == 0
    yield invoke
    shared.close()


def test_sql_writes_jsonl_with_bytes_as_base64(run):
    code, out, err = run("sql", "SELECT key, ts, blob FROM t WHERE key >= 'h' AND key < 'q' ORDER BY key, ts")
    assert code == 0, err
    assert [json.loads(line) for line in out.splitlines()] == \
        [{"key": r["key"], "ts": r["ts"], "blob": "AP8="} for r in ROWS if "h" <= r["key"] < "q"]


def test_sql_values_json_has_no_type_for_are_written_as_text(run):
    code, out, err = run("sql", "SELECT DATE '2026-01-02' AS day, CAST(1.5 AS DECIMAL(10, 2)) AS d, "
                                "CAST('2026-01-02T03:04:05' AS TIMESTAMP) AS at, COUNT(*) AS c FROM t")
    assert code == 0, err
    assert json.loads(out) == {"day": "2026-01-02", "d": "1.50", "at": "2026-01-02T03:04:05", "c": len(ROWS)}


def test_sql_group_by_as_csv(run):
    code, out, err = run("sql", "SELECT key, COUNT(*) AS c, SUM(n) AS s FROM t WHERE key < 'c' GROUP BY key "
                                "ORDER BY key", "--format", "csv")
    assert code == 0, err
    assert list(csv.DictReader(io.StringIO(out))) == [{"key": "apple", "c": "2", "s": "1"},
                                                      {"key": "banana", "c": "1", "s": "2"}]


def test_sql_to_a_parquet_file(run, tmp_path):
    target = tmp_path / "out.parquet"
    code, _, err = run("sql", "SELECT * FROM t", "--format", "parquet", "--output", str(target))
    assert code == 0, err
    assert "wrote 8 rows" in err
    assert pq.read_table(target).num_rows == len(ROWS)


def test_sql_explain_prints_the_plans_and_the_pruning_as_text(run):
    code, out, err = run("sql", "EXPLAIN SELECT * FROM t WHERE key = 'kiwi'")
    assert code == 0, err
    assert "physical_plan:" in out
    assert "sleeper_scan:" in out
    assert "t: key in ['kiwi', 'kiwi\\x00')" in out
    assert "leaves read: 1 of 3" in out


@pytest.mark.parametrize("statement,fragment", [
    ("SELEC 1", "SQL"),
    ("SELECT * FROM nope", "no table named 'nope' (tables: t)"),
    ("SELECT missing FROM t", "missing"),
    ("DELETE FROM t", "SQL"),
])
def test_bad_sql_is_a_one_line_error(run, statement, fragment):
    code, out, err = run("sql", statement)
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    assert fragment in lines[0]


def test_parquet_to_stdout_is_refused(run):
    code, _, err = run("sql", "SELECT * FROM t", "--format", "parquet")
    assert code != 0 and "--output" in err
