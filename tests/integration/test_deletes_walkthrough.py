"""The deletes walk-through (issue 22) on the embedded default: ``sleeper`` commands,
one process each, over the embedded PostgreSQL. Ingest, write, delete a key range,
query and SQL (the records are gone), the erasure report lists the files and the
tombstone (exit 3);
compaction and GC, then the report is clean (exit 0); records written after the delete
stay throughout. After compaction, GC keeps the replaced files for the history retention:
``history``, then a query and SQL ``--as-of`` the transaction before the delete return
the deleted records, exactly; GC past the retention then deletes them and the erasure
report is clean."""

from __future__ import annotations

import json
import time

import pytest

from tests.integration.test_cli_postgres import assert_one_line_error, jsonl, ok
from tests.integration.test_cli_postgres import home as home
from tests.integration.test_cli_postgres import inputs as inputs
from tests.integration.test_cli_postgres import running_postgres as running_postgres
from tests.integration.test_cli_postgres import sleeper as sleeper

pytestmark = pytest.mark.integration


def test_delete_walk_through_on_the_embedded_default(sleeper, running_postgres, inputs, home, tmp_path):
    ok(sleeper("table", "create", "fruit", "--schema", str(inputs / "schema.json"),
               "--split-points", str(inputs / "splits.txt")))
    ok(sleeper("ingest", "fruit", str(inputs / "rows.jsonl")))  # apple banana grape kiwi pear zebra
    buffered = tmp_path / "more.jsonl"
    buffered.write_text(json.dumps({"key": "fig", "ts": 7, "blob": "", "tags": {}, "nums": []}) + "\n")
    ok(sleeper("write", "fruit", str(buffered)))

    history = [json.loads(x) for x in ok(sleeper("history", "fruit", "--json")).out.splitlines()]
    before_delete = history[0]["number"]
    assert history[0]["kind"] == "add_files" and history[0]["records_added"] == 6

    r = ok(sleeper("delete", "fruit", "--range", '"b"', '"l"'))  # banana fig grape kiwi
    assert "delete 1 committed" in r.out
    keys = [x["key"] for x in jsonl(sleeper("query", "fruit", "--range", '""', "null"))]
    assert keys == ["apple", "pear", "zebra"]
    assert [x["key"] for x in jsonl(sleeper("sql", "SELECT key FROM fruit ORDER BY key"))] == keys

    later = tmp_path / "later.jsonl"
    later.write_text(json.dumps({"key": "grape", "ts": 99, "blob": "", "tags": {}, "nums": []}) + "\n")
    ok(sleeper("ingest", "fruit", str(later)))  # written after the delete: stays
    assert [x["ts"] for x in jsonl(sleeper("query", "fruit", "--key", '"grape"'))] == [99]

    r = sleeper("report", "erasure", "fruit", "--range", '"b"', '"l"', "--where", "ts < 50", "--json")
    assert r.code == 3, r.err
    held = json.loads(r.out)["held"]
    assert {h["kind"] for h in held} == {"file", "buffer entry", "state store record"}
    assert all(h["hidden_by_deletes"] for h in held if h["kind"] != "state store record")
    assert [h["name"] for h in held if h["kind"] == "state store record"] == ["tombstone 1"]  # the keys it holds

    ok(sleeper("table", "set", "fruit", "sleeper.table.delete.purge.hours=0"))
    ok(sleeper("flush", "fruit"))
    ok(sleeper("compact", "fruit"))
    # GC now keeps the replaced files (the history retention), so: history, then a query
    # as of before the delete returns the records (the buffered fig was never in a file at
    # that transaction, so it is not); the erasure report still lists those files
    assert "deleted 0 unreferenced files" in ok(sleeper("gc", "fruit")).out
    listed = ok(sleeper("history", "fruit")).out
    assert "delete_records" in listed and "replace_file_references" in listed
    r = ok(sleeper("query", "fruit", "--range", '""', "null", "--as-of", str(before_delete)))
    assert [(x["key"], x["ts"]) for x in jsonl(r)] == \
        sorted((x["key"], x["ts"]) for x in map(json.loads, (inputs / "rows.jsonl").read_text().splitlines()))
    assert "exclude the write buffer" in r.err
    assert [x["key"] for x in jsonl(sleeper("sql", "SELECT key FROM fruit WHERE key < 'l' ORDER BY key",
                                            "--as-of", str(before_delete)))] == ["apple", "banana", "grape", "kiwi"]
    assert_one_line_error(sleeper("query", "fruit", "--key", '"kiwi"', "--as-of", "12"), "no transaction 12")
    assert_one_line_error(sleeper("query", "fruit", "--key", '"kiwi"', "--as-of", "2020-01-01T00:00:00Z"),
                          "minutes of history")
    r = sleeper("report", "erasure", "fruit", "--range", '"b"', '"l"', "--where", "ts < 50")
    assert r.code == 3 and "awaiting GC" in r.out, (r.out, r.err)
    from sleeper_ops import Sleeper

    # GC as if its delay, the history retention and the settle time before a spent tombstone
    # is dropped (sleeper.table.gc.job.abandon.minutes, a day) had passed: the drop is then
    # already past the retention, so its undo record (the tombstone's keys) goes in the same run
    with Sleeper(home) as s:
        s.table("fruit").gc(now_ms=int(time.time() * 1000) + 25 * 3_600_000)
    r = sleeper("report", "erasure", "fruit", "--range", '"b"', '"l"', "--where", "ts < 50")
    assert r.code == 0 and "erased" in r.out, (r.out, r.err)
    assert [x["key"] for x in jsonl(sleeper("query", "fruit", "--range", '""', "null"))] == \
        ["apple", "grape", "pear", "zebra"]
    assert_one_line_error(sleeper("delete", "fruit", "--range", '"m"', '"c"'), "empty")
    assert_one_line_error(sleeper("delete", "fruit", "--key", '"a"', "--where", "colour = 'red'"), "colour")
