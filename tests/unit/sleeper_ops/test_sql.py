"""SQL through DataFusion: answers equal a plain Python model of the table's records
(iterators included), key predicates prune leaves and files, errors are one line.

The table has four leaves, files in an ancestor partition (a leaf split after ingest)
and in the root, the same keys in several files, and an age-off then aggregation
iterator. The model applies those iterators to the ingested records in plain Python.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from typing import Any, Callable

import pyarrow as pa
import pytest

from sleeper_ops.errors import SqlError
from sleeper_ops.io.datafile import ParquetSettings, new_data_key, write_data_file
from sleeper_ops.query.sql_explain import is_explain, render_explain
from statestore.files import FileReference
from statestore.partitions import split_children
from statestore.transactions import AddFiles, SplitPartition

SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "day", "type": "LongType"}],
    "valueFields": [{"name": "count", "type": "LongType"}, {"name": "name", "type": "StringType"},
                    {"name": "ts", "type": "LongType"}],
}
ARROW = pa.schema([pa.field("key", pa.int64(), nullable=False), pa.field("day", pa.int64(), nullable=False),
                   ("count", pa.int64()), ("name", pa.string()), ("ts", pa.int64())])
DAY_MS = 86_400_000
PROPERTIES = {"sleeper.table.iterator.ageoff": f"ts:{DAY_MS}",
              "sleeper.table.iterator.aggregation": "sum(count),max(name),max(ts)"}


def make_rows(n: int, seed: int, now: int, key_range: int = 400) -> list[dict]:
    """Rows with keys in [0, key_range), two days, and a third of them too old to keep."""
    rnd = random.Random(seed)
    return [{"key": rnd.randrange(key_range), "day": rnd.randrange(2), "count": rnd.randrange(1, 10),
             "name": f"n{rnd.randrange(1000):03d}", "ts": now - (10 * DAY_MS if rnd.random() < 0.3 else 0)}
            for _ in range(n)]


def model(rows: list[dict], now: int) -> list[dict]:
    """The table's records as its iterators define them: age-off, then one record per
    (key, day) with sum(count), max(name), max(ts)."""
    groups: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for r in rows:
        if r["ts"] >= now - DAY_MS:
            groups[(r["key"], r["day"])].append(r)
    return [{"key": k, "day": d, "count": sum(r["count"] for r in g), "name": max(r["name"] for r in g),
             "ts": max(r["ts"] for r in g)} for (k, d), g in sorted(groups.items())]


def bag(rows: list[dict], *names: str) -> Counter:
    return Counter(tuple(r[n] for n in names) for r in rows)


@pytest.fixture
def events(sleeper):
    """Table "events" (leaves split at 100, 200, 300; [100, 200) then split at 150 so its
    files sit in an ancestor), ingested twice, plus a file referenced from the root.
    Returns (table, model records)."""
    now = int(time.time() * 1000)
    t = sleeper.create_table("events", SCHEMA, split_points=[100, 200, 300], properties=PROPERTIES)
    first, second = make_rows(1500, 1, now), make_rows(1500, 2, now)
    t.ingest(pa.Table.from_pylist(first, schema=ARROW))
    t.ingest(pa.Table.from_pylist(second, schema=ARROW))
    state = t.state()
    leaf = state.tree().leaf_for_key([150])
    parent, left, right = split_children(leaf, 0, 150)
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))
    root = state.tree().root
    extra = sorted(make_rows(300, 3, now, key_range=450), key=lambda r: (r["key"], r["day"]))
    key = new_data_key(t.info.table_id, root.id)
    written = write_data_file(sleeper.objects, key, t.schema, pa.Table.from_pylist(extra, schema=ARROW),
                              ParquetSettings())
    sleeper.state_store.commit(t.info.table_id, AddFiles((FileReference(key, root.id, written.record_count),)))
    refs = t.state().references.values()
    assert {r.partition_id for r in refs} >= {leaf.id, root.id}, "files in an ancestor and in the root"
    return t, model(first + second + extra, now)


def where(records: list[dict], pred: Callable[[dict], bool]) -> list[dict]:
    return [r for r in records if pred(r)]


ALL = ("key", "day", "count", "name", "ts")


# ----- answers --------------------------------------------------------------------------------

@pytest.mark.parametrize("predicate,pred", [
    ("key >= 120 AND key < 260", lambda r: 120 <= r["key"] < 260),
    ("key = 150", lambda r: r["key"] == 150),
    ("key <= 99 OR key > 398", lambda r: r["key"] <= 99 or r["key"] > 398),
    ("key BETWEEN 140 AND 160 AND name > 'n500'", lambda r: 140 <= r["key"] <= 160 and r["name"] > "n500"),
    ("key IN (3, 150, 151, 420, 9999)", lambda r: r["key"] in (3, 150, 151, 420, 9999)),
    ("300 > key AND day = 1", lambda r: r["key"] < 300 and r["day"] == 1),
    ("count > 12", lambda r: r["count"] > 12),
    ("key = 1 AND key = 2", lambda r: False),
])
def test_select_returns_the_records_the_iterators_define(sleeper, events, predicate, pred):
    _, records = events
    result = sleeper.sql(f"SELECT * FROM events WHERE {predicate}")
    assert result.schema.names == list(ALL)
    assert bag(result.to_pylist(), *ALL) == bag(where(records, pred), *ALL)


def test_sql_answer_equals_the_query_answer(sleeper, events):
    t, _ = events
    sql = sleeper.sql("SELECT * FROM events WHERE key >= 120 AND key < 260 ORDER BY key, day")
    assert sql.to_pylist() == t.query(ranges=[(120, 260)]).to_pylist()
    assert sleeper.sql("SELECT * FROM events WHERE key = 150").to_pylist() == t.query(keys=[150]).to_pylist()


def test_group_by_and_count_over_the_whole_table(sleeper, events):
    _, records = events
    result = sleeper.sql("SELECT day, COUNT(*) AS n, SUM(count) AS total FROM events GROUP BY day ORDER BY day")
    expected = [{"day": d, "n": len(where(records, lambda r, d=d: r["day"] == d)),
                 "total": sum(r["count"] for r in records if r["day"] == d)} for d in (0, 1)]
    assert result.to_pylist() == expected
    assert sleeper.sql("SELECT COUNT(*) AS n FROM events").to_pylist() == [{"n": len(records)}]


def test_group_by_key_with_a_key_range(sleeper, events):
    _, records = events
    result = sleeper.sql("SELECT key, COUNT(*) AS n, MAX(name) AS top FROM events "
                         "WHERE key BETWEEN 90 AND 110 GROUP BY key ORDER BY key")
    expected = defaultdict(list)
    for r in where(records, lambda r: 90 <= r["key"] <= 110):
        expected[r["key"]].append(r)
    assert result.to_pylist() == [{"key": k, "n": len(g), "top": max(r["name"] for r in g)}
                                  for k, g in sorted(expected.items())]


def test_join_of_two_tables(sleeper, events):
    _, records = events
    labels = sleeper.create_table("labels", {"rowKeyFields": [{"name": "id", "type": "LongType"}],
                                             "valueFields": [{"name": "label", "type": "StringType"}]},
                                  split_points=[50])
    labels.ingest(pa.table({"id": pa.array(range(0, 80, 3), pa.int64()), "label": [f"L{i}" for i in range(0, 80, 3)]}))
    result = sleeper.sql("SELECT e.key, e.day, l.label FROM events e JOIN labels l ON e.key = l.id "
                         "WHERE e.key < 60 AND l.id >= 10")
    expected = [(r["key"], r["day"], f"L{r['key']}") for r in records if 10 <= r["key"] < 60 and r["key"] % 3 == 0]
    assert bag(result.to_pylist(), "key", "day", "label") == Counter(expected)


def test_self_join_reads_each_side_with_its_own_predicates(sleeper, events):
    _, records = events
    result = sleeper.sql("SELECT a.key, a.day AS d1, b.day AS d2 FROM events a JOIN events b ON a.key = b.key "
                         "WHERE a.key < 20 AND b.day = 1")
    expected = Counter((a["key"], a["day"], b["day"]) for a in records for b in records
                       if a["key"] == b["key"] and a["key"] < 20 and b["day"] == 1)
    assert bag(result.to_pylist(), "key", "d1", "d2") == expected


def test_the_scan_filters_again_only_what_its_key_regions_do_not_hold(sleeper, events, monkeypatch):
    """A table scanned once with only key predicates: the regions read hold exactly the
    rows they accept, so the scan applies no filter of its own; any other predicate, or a
    second scan of the table, keeps the filter. Every answer against the model."""
    from sleeper_ops.query import sql as sql_module

    _, records = events
    filtered: list[bool] = []
    real = sql_module._Fragment.scanner

    def scanner(self, *args, **kwargs):  # a scan that reads (the dataset's own scanner reads nothing)
        scan = real(self, *args, **kwargs)
        filtered.append(scan._filter is not None)
        return scan
    monkeypatch.setattr(sql_module._Fragment, "scanner", scanner)
    cases = [
        ("SELECT * FROM events WHERE key = 150", lambda r: r["key"] == 150, [False]),
        ("SELECT * FROM events WHERE key IN (3, 151) OR key >= 398", lambda r: r["key"] in (3, 151)
         or r["key"] >= 398, [False]),
        ("SELECT * FROM events WHERE key = 150 AND day = 1", lambda r: r["key"] == 150 and r["day"] == 1, [True]),
        ("SELECT * FROM events WHERE key <> 150 AND key < 160", lambda r: 150 != r["key"] < 160, [True]),
    ]
    for statement, pred, expected in cases:
        filtered.clear()
        assert bag(sleeper.sql(statement).to_pylist(), *ALL) == bag(where(records, pred), *ALL), statement
        assert filtered == expected, statement
    # one table, two scans, each with its own key: the regions read are the union, so each filters
    filtered.clear()
    result = sleeper.sql("SELECT a.key AS ka, b.key AS kb FROM events a JOIN events b ON a.day = b.day "
                         "WHERE a.key = 5 AND b.key = 7")
    expected_pairs = Counter((a["key"], b["key"]) for a in records for b in records
                             if a["day"] == b["day"] and a["key"] == 5 and b["key"] == 7)
    assert bag(result.to_pylist(), "ka", "kb") == expected_pairs and expected_pairs
    assert filtered == [True, True]


def test_string_and_bytes_keys_prune_in_their_own_order(sleeper):
    s = sleeper.create_table("s", {"rowKeyFields": [{"name": "k", "type": "StringType"}]}, split_points=["b"])
    s.ingest(pa.table({"k": ["", "A", "Z", "a", "aa", "b", "ba", "z", "~", "é"]}))
    assert sleeper.sql("SELECT k FROM s WHERE k >= 'Z' AND k < 'b' ORDER BY k").column("k").to_pylist() == \
        ["Z", "a", "aa"]
    assert sleeper.sql("SELECT k FROM s WHERE k > 'z' ORDER BY k").column("k").to_pylist() == ["~", "é"]
    b = sleeper.create_table("b", {"rowKeyFields": [{"name": "k", "type": "ByteArrayType"}]}, split_points=[b"\x80"])
    b.ingest(pa.table({"k": pa.array([b"\x00", b"\x7f", b"\x80", b"\x80\x00", b"\xff"], pa.binary())}))
    assert sleeper.sql("SELECT k FROM b WHERE k >= X'80' ORDER BY k").column("k").to_pylist() == \
        [b"\x80", b"\x80\x00", b"\xff"]


# ----- pruning --------------------------------------------------------------------------------

def _files_read(sleeper, monkeypatch) -> set[str]:
    opened: set[str] = set()
    real = sleeper.objects.open_input

    def spy(key: str, *args: Any, **kwargs: Any) -> Any:
        opened.add(key)
        return real(key, *args, **kwargs)
    monkeypatch.setattr(sleeper.objects, "open_input", spy)
    return opened


def _files_holding(table, key: int) -> set[str]:
    """Files referenced from a partition whose region holds ``key`` (a leaf or an ancestor)."""
    state = table.state()
    return {r.filename for r in state.references.values()
            if state.partitions[r.partition_id].region.contains([key])}


def test_a_key_predicate_reads_only_the_files_of_the_leaf_and_its_ancestors(sleeper, events, monkeypatch):
    t, records = events
    opened = _files_read(sleeper, monkeypatch)
    assert sleeper.sql("SELECT COUNT(*) AS n FROM events WHERE key = 42").to_pylist() == \
        [{"n": len(where(records, lambda r: r["key"] == 42))}]
    wanted = _files_holding(t, 42)
    assert opened and opened <= wanted, f"read {opened - wanted} outside the key's leaf and ancestors"
    opened.clear()
    sleeper.sql("SELECT COUNT(*) AS n FROM events")
    assert len(opened) == len({f for f, _ in t.state().references}) > len(wanted)
    opened.clear()
    assert sleeper.sql("SELECT * FROM events WHERE key = 1 AND key = 2").num_rows == 0
    assert opened == set(), "a predicate no key satisfies reads nothing"


def test_rows_are_streamed_so_a_limit_stops_reading_files(sleeper, monkeypatch):
    t = sleeper.create_table("wide", {"rowKeyFields": [{"name": "k", "type": "LongType"}],
                                      "valueFields": [{"name": "v", "type": "LongType"}]},
                             split_points=list(range(1000, 20_000, 1000)))
    t.ingest(pa.table({"k": pa.array(range(20_000), pa.int64()), "v": pa.array(range(20_000), pa.int64())}))
    opened = _files_read(sleeper, monkeypatch)
    assert sleeper.sql("SELECT * FROM wide WHERE v >= 0 LIMIT 5").num_rows == 5
    assert 0 < len(opened) <= 4, f"a LIMIT 5 opened {len(opened)} of 20 files"


def _scan_lines(result: pa.Table) -> list[str]:
    assert is_explain(result)
    rows = [r["plan"] for r in result.to_pylist() if r["plan_type"] == "sleeper_scan"]
    assert len(rows) == 1, rows
    return rows[0].splitlines()


def test_explain_shows_the_key_regions_leaves_and_files_chosen(sleeper, events):
    t, _ = events
    state = t.state()
    leaves = len(state.tree().leaves())
    files = len({f for f, _ in state.references})
    whole = _scan_lines(sleeper.sql("EXPLAIN SELECT * FROM events"))
    assert "whole table" in whole[0]
    assert whole[1].startswith(f"leaves read: {leaves} of {leaves}")
    assert whole[2].startswith(f"files read: {files} of {files}")

    pruned = _scan_lines(sleeper.sql("EXPLAIN SELECT * FROM events WHERE key >= 40 AND key < 60"))
    assert pruned[0] == "events: key in [40, 60)"
    assert pruned[1].startswith(f"leaves read: 1 of {leaves}")
    assert pruned[2].startswith(f"files read: {len(_files_holding(t, 50))} of {files}")
    assert len(_files_holding(t, 50)) < files
    text = render_explain(sleeper.sql("EXPLAIN SELECT key FROM events WHERE key = 150 OR key = 399"))
    assert "logical_plan:" in text and "physical_plan:" in text
    assert "events: key in [150, 151), [399, 400)" in text
    assert "leaves read: 2 of" in text


def test_quoted_and_qualified_table_names_prune_too(sleeper):
    t = sleeper.create_table("My-Table", {"rowKeyFields": [{"name": "Key", "type": "LongType"}]}, split_points=[5])
    t.ingest(pa.table({"Key": pa.array(range(10), pa.int64())}))
    for name in ('"My-Table"', 'public."My-Table"', 'datafusion.public."My-Table"'):
        result = sleeper.sql(f'EXPLAIN SELECT * FROM {name} WHERE "Key" >= 7')
        assert _scan_lines(result)[:2] == ["My-Table: Key in [7, unbounded)",
                                           "leaves read: 1 of 2 (partitions with references read: 1)"], name
        assert sleeper.sql(f'SELECT "Key" FROM {name} WHERE "Key" >= 7').column("Key").to_pylist() == [7, 8, 9]


def test_every_table_can_be_named_and_show_tables_lists_them(sleeper, events):
    sleeper.create_table("other", {"rowKeyFields": [{"name": "k", "type": "StringType"}]})
    names = set(sleeper.sql("SHOW TABLES").column("table_name").to_pylist())
    assert {"events", "other"} <= names
    assert sleeper.sql("SELECT COUNT(*) AS n FROM other").to_pylist() == [{"n": 0}]


# ----- errors ---------------------------------------------------------------------------------

@pytest.mark.parametrize("statement,fragment", [
    ("SELEC * FROM events", "SQL"),
    ("SELECT nope FROM events", "nope"),
    ("SELECT * FROM missing_table", "no table named 'missing_table' (tables: events)"),
    ("SELECT * FROM Events", "no table named 'Events' (tables: events)"),
    ("DROP TABLE events", "DDL not supported"),
    ("INSERT INTO events VALUES (1, 1, 1, 'a', 1)", "SQL"),
    ("CREATE TABLE x AS SELECT 1", "SQL"),
])
def test_bad_sql_and_unknown_tables_are_one_line_sql_errors(sleeper, events, statement, fragment):
    with pytest.raises(SqlError) as e:
        sleeper.sql(statement)
    assert fragment in str(e.value)
    assert "\n" not in str(e.value)
    assert sleeper.sql("SELECT COUNT(*) AS n FROM events").num_rows == 1, "the table is still there"


def test_an_error_reading_the_table_keeps_its_own_type(sleeper, events):
    from sleeper_ops.errors import ConfigError

    # a table holding a bad iterator from before properties were checked when set
    sleeper.state_store.update_properties("events", {"sleeper.table.iterator.aggregation": "sum(count)"})
    with pytest.raises(ConfigError):
        sleeper.sql("SELECT * FROM events WHERE key = 3")
