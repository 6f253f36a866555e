"""``sleeper delete`` and ``sleeper report erasure`` (issue 22) through the CLI on the
in-memory store: a delete hides the records from query and SQL, the erasure report
lists the files until compaction and GC purge them (exit 3, then 0), and bad input is
refused in one line."""

from __future__ import annotations

import time

import pytest

import sleeper_ops.api
from tests.unit.sleeper_ops.test_cli import assert_one_line_error, ok
from tests.unit.sleeper_ops.test_cli import files as files
from tests.unit.sleeper_ops.test_cli import home as home
from tests.unit.sleeper_ops.test_cli import run as run
from tests.unit.sleeper_ops.test_cli import table as table


def _keys(run) -> list[str]:  # type: ignore[no-untyped-def]
    return [r["key"] for r in ok(run("query", "t", "--range", '""', "null")).jsonl()]


def test_delete_then_compaction_and_gc_until_the_erasure_report_is_clean(table, run, home) -> None:  # type: ignore[no-untyped-def]
    assert "committed" in ok(run("delete", "t", "--range", '"b"', '"h"')).out
    assert _keys(run) == ["apple", "apple", "kiwi", "pear", "plum", "zucchini", "zz"]
    assert [r["key"] for r in ok(run("sql", "SELECT key FROM t WHERE key < 'k'")).jsonl()] == ["apple", "apple"]
    r = run("report", "erasure", "t", "--range", '"b"', '"h"', "--json")
    assert r.code == 3 and not r.json()["clean"]
    assert {h["kind"] for h in r.json()["held"]} == {"file", "state store record"}  # the files and the tombstone
    ok(run("table", "set", "t", "sleeper.table.delete.purge.hours=0"))
    ok(run("compact", "t"))
    r = run("report", "erasure", "t", "--range", '"b"', '"h"')
    assert r.code == 3 and "file awaiting GC" in r.out
    with sleeper_ops.api.Sleeper(home) as s:  # the commands' Sleeper: GC as if the GC delay, the settle
        s.table("t").gc(now_ms=int(time.time() * 1000) + 24 * 3_600_000)  # time and the history retention had passed
    r = run("report", "erasure", "t", "--range", '"b"', '"h"')
    assert r.code == 0 and "erased" in r.out, r.out
    assert _keys(run) == ["apple", "apple", "kiwi", "pear", "plum", "zucchini", "zz"]


def test_a_predicate_narrows_a_delete(table, run) -> None:  # type: ignore[no-untyped-def]
    ok(run("delete", "t", "--key", '"apple"', "--where", "ts = 2"))
    assert [r["ts"] for r in ok(run("query", "t", "--key", '"apple"')).jsonl()] == [1]


@pytest.mark.parametrize(("args", "fragments"), [
    (("--range", '"k"', '"k"'), ("empty",)),
    (("--range", '"p"', '"c"'), ("empty",)),
    ((), ("give a key or a range",)),
    (("--key", '"a"', "--where", "colour = 'red'"), ("--where", "colour")),
])
def test_bad_delete_input_is_refused_in_one_line(table, run, args, fragments) -> None:  # type: ignore[no-untyped-def]
    assert_one_line_error(run("delete", "t", *args), *fragments)
    assert_one_line_error(run("report", "erasure", "t", *args), *fragments)


def test_an_object_under_the_data_prefix_that_cannot_be_decoded_keeps_exit_3(table, run, home) -> None:  # type: ignore[no-untyped-def]
    with sleeper_ops.api.Sleeper(home) as s:
        info = s.table("t").info
        s.objects.put(f"{info.table_id}/data/partition_root/stray.bin", b"\x00not a format we write")
    r = run("report", "erasure", "t", "--key", '"nope"')  # no record has it: only the stray keeps exit 3
    assert r.code == 3, r.out
    line = next(x for x in r.out.splitlines() if "stray.bin" in x)
    assert line.startswith("  untracked object: ") and "cannot tell" in line and "orphan sweep" in line, line
    r = run("report", "erasure", "t", "--key", '"nope"', "--json")
    (held,) = [h for h in r.json()["held"] if h["name"].endswith("stray.bin")]
    assert held["cannot_tell"] and held["rows"] is None and held["goes_ms"] is not None


def test_the_fine_print_says_what_is_checked_and_that_as_of_reads_return_deleted_records(table, run) -> None:  # type: ignore[no-untyped-def]
    r = run("report", "erasure", "t", "--key", '"nothing-here"')
    assert r.code == 0 and "erased" in r.out, r.out
    assert "never records" not in r.out and "file metadata only" not in r.out
    assert "--as-of read of a state from before the delete returns the records" in r.out
    assert "transaction bodies and history rows, snapshots" in r.out
