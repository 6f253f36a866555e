"""``sleeper sql`` as users run it: one process per command over PostgreSQL, the SQL
answers checked against the rows ingested (and against ``sleeper query``), EXPLAIN's
pruning, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).with_name("sleeper"))
EVENTS = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "n", "type": "LongType"}]}
USERS = {"rowKeyFields": [{"name": "id", "type": "StringType"}],
         "valueFields": [{"name": "team", "type": "StringType"}]}
WORDS = ["ant", "bee", "cat", "dog", "eel", "fox", "gnu", "hen", "ibis", "jay", "kiwi", "lynx", "mole", "newt"]
BATCH_1 = [{"key": w, "ts": i, "n": i} for i, w in enumerate(WORDS)]
BATCH_2 = [{"key": w, "ts": 100 + i, "n": 10 * i} for i, w in enumerate(WORDS[::2])]


@dataclass
class Result:
    code: int
    out: str
    err: str

    def jsonl(self) -> list[dict]:
        assert self.code == 0, f"exit {self.code}: {self.err}"
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


@pytest.fixture
def sleeper(tmp_path, pg_dsn):
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "SLEEPER_HOME": str(home), "SLEEPER_STATE_STORE_DSN": pg_dsn}

    def run(*args: str) -> Result:
        p = subprocess.run([SLEEPER, *args], env=env, cwd=home, capture_output=True, text=True, timeout=120)
        return Result(p.returncode, p.stdout, p.stderr)

    for name, schema, splits, rows in (("events", EVENTS, "d\nk\n", [BATCH_1, BATCH_2]),
                                       ("users", USERS, "", [[{"id": w, "team": w[0]} for w in WORDS[:6]]])):
        (tmp_path / f"{name}.json").write_text(json.dumps(schema))
        (tmp_path / f"{name}-splits.txt").write_text(splits)
        r = run("table", "create", name, "--schema", str(tmp_path / f"{name}.json"),
                *(["--split-points", str(tmp_path / f"{name}-splits.txt")] if splits else []))
        assert r.code == 0, r.err
        for i, batch in enumerate(rows):
            (tmp_path / f"{name}-{i}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in batch))
            r = run("ingest", name, str(tmp_path / f"{name}-{i}.jsonl"))
            assert r.code == 0, r.err
    return run


def test_sql_over_postgres_answers_as_the_rows_and_the_query_do(sleeper):
    everything = BATCH_1 + BATCH_2
    got = sleeper("sql", "SELECT key, ts, n FROM events WHERE key >= 'c' AND key < 'kz' ORDER BY key, ts").jsonl()
    assert got == sorted((r for r in everything if "c" <= r["key"] < "kz"), key=lambda r: (r["key"], r["ts"]))
    assert got == sleeper("query", "events", "--range", '"c"', '"kz"').jsonl()

    grouped = sleeper("sql", "SELECT key, COUNT(*) AS c, SUM(n) AS s FROM events GROUP BY key ORDER BY key").jsonl()
    expected = Counter()
    for r in everything:
        expected[r["key"]] += 1
    assert [(g["key"], g["c"], g["s"]) for g in grouped] == \
        [(k, expected[k], sum(r["n"] for r in everything if r["key"] == k)) for k in sorted(expected)]

    joined = sleeper("sql", "SELECT u.team, COUNT(*) AS c FROM events e JOIN users u ON e.key = u.id "
                            "WHERE e.key < 'e' GROUP BY u.team ORDER BY u.team").jsonl()
    assert joined == [{"team": "a", "c": 2}, {"team": "b", "c": 1}, {"team": "c", "c": 2}, {"team": "d", "c": 1}]


def test_explain_over_postgres_shows_fewer_leaves_and_files_for_a_key(sleeper):
    whole = sleeper("sql", "EXPLAIN SELECT * FROM events")
    pruned = sleeper("sql", "EXPLAIN SELECT * FROM events WHERE key = 'fox'")
    assert whole.code == 0 and pruned.code == 0, whole.err + pruned.err
    # two ingests over 3 leaves: two files, each shared by the leaves (a reference from each)
    assert "leaves read: 3 of 3" in whole.out and "files read: 2 of 2 (file references: 6 of 6)" in whole.out
    assert "events: key in ['fox', 'fox\\x00')" in pruned.out
    assert "leaves read: 1 of 3" in pruned.out and "file references: 2 of 6" in pruned.out


def test_unknown_table_over_postgres_is_one_line(sleeper):
    r = sleeper("sql", "SELECT * FROM evnts")
    assert r.code == 1 and "Traceback" not in r.err
    assert r.err.strip() == "error: no table named 'evnts' (tables: events, users)"
