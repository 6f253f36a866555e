"""``sleeper export`` (issue 22) through the CLI on the in-memory store: the files'
union is the table's query answer, a repeat of an export key writes nothing, and bad
input (an empty or inverted range, an unknown field, a destination holding another
export) is refused in one line."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from tests.unit.sleeper_ops.test_cli import assert_one_line_error, ok
from tests.unit.sleeper_ops.test_cli import files as files
from tests.unit.sleeper_ops.test_cli import home as home
from tests.unit.sleeper_ops.test_cli import run as run
from tests.unit.sleeper_ops.test_cli import table as table


def _rows(dest, manifest) -> list[tuple]:  # type: ignore[no-untyped-def]
    out = []
    for f in manifest["files"]:
        out += [(r["key"], r["ts"]) for r in pq.read_table(dest / f["key"]).to_pylist()]
    return out


def test_export_writes_a_file_per_leaf_whose_union_is_the_query_answer(table, run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "exp"
    r = ok(run("export", "t", str(dest), "--export-key", "2026-01-01", "--json")).json()
    m = r["manifest"]
    assert r["written"] and len(m["files"]) == 3
    queried = [(q["key"], q["ts"]) for q in ok(run("query", "t", "--range", '""', "null")).jsonl()]
    assert _rows(dest, m) == queried and m["rows"] == len(queried)
    again = ok(run("export", "t", str(dest), "--export-key", "2026-01-01"))
    assert "already exported" in again.out
    ranged = ok(run("export", "t", str(tmp_path / "r"), "--range", '"b"', '"q"', "--where", "ts > 1",
                    "--json")).json()["manifest"]
    assert _rows(tmp_path / "r", ranged) == [(k, ts) for k, ts in queried if "b" <= k < "q" and ts > 1]
    assert json.loads((dest / "_manifest.json").read_text())["export_key"] == "2026-01-01"


@pytest.mark.parametrize(("args", "fragments"), [
    (("--range", '"k"', '"k"'), ("empty",)),
    (("--range", '"p"', '"c"'), ("empty",)),
    (("--where", "colour = 'red'"), ("--where", "colour")),
])
def test_bad_export_input_is_refused_in_one_line(table, run, tmp_path, args, fragments) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run("export", "t", str(tmp_path / "exp"), *args), *fragments)
    assert not (tmp_path / "exp").exists()


def test_a_destination_holding_another_export_is_refused_in_one_line(table, run, tmp_path) -> None:  # type: ignore[no-untyped-def]
    ok(run("export", "t", str(tmp_path / "exp"), "--export-key", "a"))
    assert_one_line_error(run("export", "t", str(tmp_path / "exp"), "--export-key", "b"), "already holds export 'a'")
