"""Standard ingest: files in (Parquet, CSV, JSON Lines), sorted data files out, one commit.

Every test goes through the public API (``Sleeper.create_table``, ``Table.ingest``,
``Table.query``, ``Table.state``) and reads the data files back with pyarrow.
"""

from __future__ import annotations

import base64
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.errors import IngestError
from sleeper_ops.io.datafile import read_sketches, sketch_key
from sleeper_ops.io.storage import ObjectStore
from statestore.errors import CommitConflictError
from statestore.memory import InMemoryStateStore
from statestore.transactions import AddFiles

# ----- helpers ----------------------------------------------------------------------------

BASE_SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "LongType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}],
    "valueFields": [{"name": "id", "type": "LongType"}, {"name": "name", "type": "StringType"},
                    {"name": "blob", "type": "ByteArrayType"}],
}
BASE_ARROW = pa.schema([("key", pa.int64()), ("ts", pa.int64()), ("id", pa.int64()), ("name", pa.string()),
                        ("blob", pa.binary())])


def hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple((k, hashable(x)) for k, x in v.items())
    return v


def row_counter(table: pa.Table, names: list[str] | None = None) -> Counter:
    names = names or table.column_names
    return Counter(tuple(hashable(r[n]) for n in names) for r in table.to_pylist())


def base_rows(n: int, seed: int = 1, key_range: int = 1000) -> pa.Table:
    """``n`` rows of BASE_SCHEMA with repeated row keys (so sort keys matter) and unique ids."""
    rnd = random.Random(seed)
    rows = [{"key": rnd.randrange(key_range), "ts": rnd.randrange(50), "id": i, "name": f"name-{i}-é",
             "blob": bytes(rnd.randrange(256) for _ in range(rnd.randrange(5)))} for i in range(n)]
    return pa.Table.from_pylist(rows, schema=BASE_ARROW)


def jsonable(v: Any, t: pa.DataType) -> Any:
    """A value of Arrow type ``t`` as JSON: bytes as base64, maps as objects."""
    if v is None:
        return None
    if pa.types.is_binary(t):
        return base64.b64encode(v).decode("ascii")
    if pa.types.is_map(t):
        return {str(jsonable(k, t.key_type)): jsonable(x, t.item_type) for k, x in v}
    if pa.types.is_list(t):
        return [jsonable(x, t.value_type) for x in v]
    return v


def write_parquet(path: Path, table: pa.Table) -> str:
    pq.write_table(table, path)
    return str(path)


def write_csv(path: Path, table: pa.Table) -> str:
    cols = {}
    for f in table.schema:
        c = table.column(f.name)
        if pa.types.is_binary(f.type):
            c = pa.array([None if v is None else base64.b64encode(v).decode() for v in c.to_pylist()], pa.string())
        cols[f.name] = c
    pacsv.write_csv(pa.table(cols), path)
    return str(path)


def write_jsonl(path: Path, table: pa.Table) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for r in table.to_pylist():
            f.write(json.dumps({k: jsonable(v, table.schema.field(k).type) for k, v in r.items()}) + "\n")
    return str(path)


WRITERS: dict[str, Callable[[Path, pa.Table], str]] = {
    "parquet": write_parquet, "csv": write_csv, "jsonl": write_jsonl}


def everything(table) -> pa.Table:  # type: ignore[no-untyped-def]
    """Every record of ``table``: one unbounded range from the least key."""
    least = {"IntType": -(2**31), "LongType": -(2**63), "StringType": "", "ByteArrayType": b""}
    return table.query(ranges=[(least[table.schema.row_key_fields[0].type], None)])


def read_data_file(sleeper: Sleeper, filename: str) -> pa.Table:
    with sleeper.objects.open_input(filename) as f:
        return pq.read_table(f)


def assert_sorted(table: pa.Table, names: list[str], what: str) -> None:
    keys = [tuple(r[n] for n in names) for r in table.select(names).to_pylist()]
    assert keys == sorted(keys), f"{what} is not sorted by {names}"


def assert_nothing_committed(sleeper: Sleeper, table) -> None:  # type: ignore[no-untyped-def]
    state = table.state()
    assert state.files == {}, f"files were committed: {sorted(state.files)}"
    assert state.references == {}
    left = [o.key for o in sleeper.objects.list(table.info.table_id)]
    assert left == [], f"objects left under the table prefix: {left}"


class RecordingStateStore(InMemoryStateStore):
    """An in-memory store that records every commit."""

    def __init__(self) -> None:
        super().__init__()
        self.commits: list[Any] = []

    def commit(self, table_id, transaction, **bookkeeping):  # type: ignore[no-untyped-def]
        self.commits.append(transaction)
        return super().commit(table_id, transaction, **bookkeeping)


class RefusingStateStore(InMemoryStateStore):
    """An in-memory store whose commits always fail, as after exhausted retries."""

    def commit(self, table_id, transaction, **bookkeeping):  # type: ignore[no-untyped-def]
        raise CommitConflictError("commit refused by the test")


# ----- every record comes back ------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_ingest_of_each_format_returns_every_record_via_query(sleeper, input_dir, fmt):
    data = base_rows(3000)
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[300, 700])
    path = WRITERS[fmt](input_dir / f"in.{fmt}", data)

    result = t.ingest([path])

    assert result.records == 3000
    got = everything(t)
    assert row_counter(got, data.column_names) == row_counter(data)


def test_ingest_of_several_files_of_mixed_formats_returns_every_record_once(sleeper, input_dir):
    data = base_rows(1500)
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[500])
    paths = [write_parquet(input_dir / "a.parquet", data.slice(0, 500)),
             write_csv(input_dir / "b.csv", data.slice(500, 500)),
             write_jsonl(input_dir / "c.jsonl", data.slice(1000))]

    result = t.ingest(paths)

    assert result.records == 1500
    assert row_counter(everything(t), data.column_names) == row_counter(data)
    assert len(t.state().references) == 2  # still one file per leaf, all inputs merged


def test_second_ingest_adds_to_the_first(sleeper, input_dir):
    data = base_rows(1000)
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[500])
    t.ingest([write_parquet(input_dir / "a.parquet", data.slice(0, 600))])
    t.ingest([write_parquet(input_dir / "b.parquet", data.slice(600))])

    assert row_counter(everything(t), data.column_names) == row_counter(data)
    assert len(t.state().files) == 2 and len(t.state().references) == 4  # each ingest one file over both leaves


def test_ingest_reports_progress_adding_up_to_the_records_read(sleeper, input_dir):
    t = sleeper.create_table("t", BASE_SCHEMA)
    seen: list[int] = []
    t.ingest([write_parquet(input_dir / "a.parquet", base_rows(2500))], progress=seen.append)
    assert sum(seen) == 2500


def test_ingest_of_empty_input_commits_nothing(sleeper, input_dir):
    t = sleeper.create_table("t", BASE_SCHEMA)
    result = t.ingest([write_parquet(input_dir / "empty.parquet", BASE_ARROW.empty_table())])
    assert result.records == 0
    assert_nothing_committed(sleeper, t)


# ----- layout: one file per leaf, one commit, sorted, sketches ------------------------------

def test_ingest_writes_one_file_per_leaf_with_records_in_a_single_add_files_commit(tmp_path, input_dir):
    store = RecordingStateStore()
    s = Sleeper(state_store=store, objects=ObjectStore(str(tmp_path / "data")))
    data = base_rows(4000, key_range=1000)
    # Four leaves; keys lie in [0, 1000), so the leaf [2000, ∞) gets nothing.
    t = s.create_table("t", BASE_SCHEMA, split_points=[250, 500, 2000])

    t.ingest([write_parquet(input_dir / "in.parquet", data)])

    assert len(store.commits) == 1, f"expected one commit, got {store.commits}"
    assert isinstance(store.commits[0], AddFiles)
    state = t.state()
    tree = state.tree()
    refs = list(state.references.values())
    assert len(refs) == 3
    assert len(state.files) == 3
    assert len({r.partition_id for r in refs}) == 3, "two files in one leaf"
    assert all(tree.by_id[r.partition_id].is_leaf for r in refs)
    assert sum(r.record_count for r in refs) == 4000
    keys = data.column("key").to_pylist()
    for r in refs:
        rng = tree.by_id[r.partition_id].region.ranges[0]
        expected = sum(1 for k in keys if rng.contains(k))
        assert r.record_count == expected, f"partition {rng}: count {r.record_count} != {expected}"
        assert not r.count_approximate
        file_keys = read_data_file(s, r.filename).column("key").to_pylist()
        assert len(file_keys) == r.record_count
        assert all(rng.contains(k) for k in file_keys), f"file of {rng} holds keys outside it"


def test_data_files_are_sorted_by_row_key_then_sort_key(sleeper, input_dir):
    data = base_rows(5000, seed=7, key_range=100)  # ~50 rows per key: the sort key decides their order
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[50])
    t.ingest([write_csv(input_dir / "in.csv", data)])

    refs = list(t.state().references.values())
    assert len(refs) == 2
    for r in refs:
        table = read_data_file(sleeper, r.filename)
        assert table.num_rows == r.record_count
        assert_sorted(table, ["key", "ts"], r.filename)
        assert table.column("ts").to_pylist() != sorted(table.column("ts").to_pylist()), \
            "data too easy: the sort key alone is already sorted"


def test_each_data_file_has_a_sketch_sidecar_whose_median_lies_in_its_key_range(sleeper, input_dir):
    data = base_rows(3000, seed=3)
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[400])
    t.ingest([write_parquet(input_dir / "in.parquet", data)])

    refs = list(t.state().references.values())
    assert len(refs) == 2
    for r in refs:
        assert sleeper.objects.head(sketch_key(r.filename)) is not None, f"no sidecar for {r.filename}"
        sketch = read_sketches(sleeper.objects, t.schema, r.filename).fields["key"]
        keys = sorted(read_data_file(sleeper, r.filename).column("key").to_pylist())
        assert sketch.count == len(keys)
        median = sketch.quantile(0.5)
        assert keys[0] <= median <= keys[-1]
        rank = sum(1 for k in keys if k <= median) / len(keys)
        assert 0.4 <= rank <= 0.6, f"sketch median {median} has rank {rank:.2f} in the file"
        assert sketch.min() == keys[0] and sketch.max() == keys[-1]


def test_sketch_sidecar_of_non_ascii_string_keys_reads_back(sleeper, input_dir):
    schema = {"rowKeyFields": [{"name": "k", "type": "StringType"}]}
    t = sleeper.create_table("t", schema)
    t.ingest([write_parquet(input_dir / "in.parquet", pa.table({"k": ["café", "naïve", "plain"]}))])
    (ref,) = t.state().references.values()
    sketch = read_sketches(sleeper.objects, t.schema, ref.filename).fields["k"]
    assert sketch.min() == "café" and sketch.max() == "plain"


# ----- key types ----------------------------------------------------------------------------

def _int_keys(rnd: random.Random) -> Any:
    return rnd.randrange(-50_000, 50_000)


def _long_keys(rnd: random.Random) -> Any:
    return rnd.choice([rnd.randrange(-(2**62), 2**62), rnd.randrange(-1000, 1000)])


_ASCII = ["a", "b", "m", "z", "A", " ", "~"]
_UNICODE = [*_ASCII, "é", "ÿ", "中", "😀", "Ā"]


def _string_keys(rnd: random.Random) -> Any:
    return "".join(rnd.choice(_ASCII) for _ in range(rnd.randrange(0, 4)))


def _unicode_string_keys(rnd: random.Random) -> Any:
    return "".join(rnd.choice(_UNICODE) for _ in range(rnd.randrange(0, 4)))


def _bytes_keys(rnd: random.Random) -> Any:
    return bytes(rnd.choice([0, 1, 0x7F, 0x80, 0x90, 0xFF]) for _ in range(rnd.randrange(0, 4)))


KEY_TYPES = [
    pytest.param("IntType", pa.int32(), _int_keys, 0, id="IntType"),
    pytest.param("LongType", pa.int64(), _long_keys, 0, id="LongType"),
    pytest.param("StringType", pa.string(), _string_keys, "m", id="StringType"),
    pytest.param("StringType", pa.string(), _unicode_string_keys, "m", id="StringType-unicode"),
    pytest.param("ByteArrayType", pa.binary(), _bytes_keys, b"\x80", id="ByteArrayType"),
]


@pytest.mark.parametrize("key_type,arrow_type,gen,split", KEY_TYPES)
def test_ingest_and_query_each_row_key_type_in_sleeper_order(sleeper, input_dir, key_type, arrow_type, gen, split):
    rnd = random.Random(11)
    schema = {"rowKeyFields": [{"name": "k", "type": key_type}], "sortKeyFields": [{"name": "ts", "type": "LongType"}],
              "valueFields": [{"name": "id", "type": "LongType"}]}
    data = pa.table({"k": pa.array([gen(rnd) for _ in range(2000)], arrow_type),
                     "ts": pa.array([rnd.randrange(10) for _ in range(2000)], pa.int64()),
                     "id": pa.array(range(2000), pa.int64())})
    t = sleeper.create_table("t", schema, split_points=[split])

    t.ingest([write_parquet(input_dir / "in.parquet", data)])

    got = everything(t)
    assert row_counter(got) == row_counter(data)
    # Python's order of int, str and bytes is Sleeper's (code points; unsigned bytes).
    assert_sorted(got, ["k", "ts"], "query result")
    for r in t.state().references.values():
        assert_sorted(read_data_file(sleeper, r.filename), ["k", "ts"], r.filename)
    probe = data.column("k")[17].as_py()
    exact = t.query(keys=[probe])
    assert exact.num_rows == data.column("k").to_pylist().count(probe)
    assert set(exact.column("k").to_pylist()) == {probe}


def test_multiple_row_key_fields_sort_and_query_by_every_field(sleeper, input_dir):
    rnd = random.Random(5)
    schema = {"rowKeyFields": [{"name": "region", "type": "StringType"}, {"name": "user", "type": "LongType"}],
              "sortKeyFields": [{"name": "ts", "type": "LongType"}],
              "valueFields": [{"name": "id", "type": "LongType"}]}
    n = 3000
    data = pa.table({"region": [rnd.choice(["eu", "us", "ap", "sa"]) for _ in range(n)],
                     "user": pa.array([rnd.randrange(20) for _ in range(n)], pa.int64()),
                     "ts": pa.array([rnd.randrange(100) for _ in range(n)], pa.int64()),
                     "id": pa.array(range(n), pa.int64())})
    t = sleeper.create_table("t", schema, split_points=["m"])

    t.ingest([write_jsonl(input_dir / "in.jsonl", data)])

    assert row_counter(everything(t)) == row_counter(data)
    for r in t.state().references.values():
        assert_sorted(read_data_file(sleeper, r.filename), ["region", "user", "ts"], r.filename)
    rows = data.to_pylist()
    exact = t.query(keys=[("eu", 7)])
    assert row_counter(exact) == Counter(tuple(r.values()) for r in rows if r["region"] == "eu" and r["user"] == 7)
    assert_sorted(exact, ["region", "user", "ts"], "exact-key result")
    prefix = t.query(keys=[("us",)])
    assert row_counter(prefix) == Counter(tuple(r.values()) for r in rows if r["region"] == "us")



def test_a_tree_split_on_the_second_row_key_puts_each_record_in_its_leaf_sorted(sleeper, input_dir):
    """Leaves split on a row key other than the first take the sort of
    ``engine/leaves.py`` (the prefix-number sort applies to splits on the first only)."""
    from statestore.partitions import split_children
    from statestore.transactions import SplitPartition

    rnd = random.Random(6)
    schema = {"rowKeyFields": [{"name": "region", "type": "StringType"}, {"name": "user", "type": "LongType"}],
              "sortKeyFields": [{"name": "ts", "type": "LongType"}],
              "valueFields": [{"name": "id", "type": "LongType"}]}
    n = 2000
    data = pa.table({"region": [rnd.choice(["eu", "us", "ap"]) for _ in range(n)],
                     "user": pa.array([rnd.randrange(20) for _ in range(n)], pa.int64()),
                     "ts": pa.array([rnd.randrange(100) for _ in range(n)], pa.int64()),
                     "id": pa.array(range(n), pa.int64())})
    t = sleeper.create_table("t", schema)
    root = next(iter(t.state().partitions.values()))
    parent, left, right = split_children(root, 1, 10, "low-users", "high-users")
    sleeper.state_store.commit(t.info.table_id, SplitPartition(parent, left, right))

    t.ingest([write_parquet(input_dir / "in.parquet", data)])

    refs = list(t.state().references.values())
    assert sorted(r.partition_id for r in refs) == ["high-users", "low-users"]
    for r in refs:
        rows = read_data_file(sleeper, r.filename)
        assert_sorted(rows, ["region", "user", "ts"], r.filename)
        users = rows.column("user").to_pylist()
        assert all(u < 10 for u in users) if r.partition_id == "low-users" else all(u >= 10 for u in users)
    assert sum(r.record_count for r in refs) == n
    assert row_counter(everything(t)) == row_counter(data)

# ----- map and list values ------------------------------------------------------------------

NESTED_SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "valueFields": [
        {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
        {"name": "counts", "type": {"MapType": {"keyType": "LongType", "valueType": "StringType"}}},
        {"name": "blobs", "type": {"MapType": {"keyType": "ByteArrayType", "valueType": "ByteArrayType"}}},
        {"name": "nums", "type": {"ListType": {"elementType": "IntType"}}},
        {"name": "parts", "type": {"ListType": {"elementType": "ByteArrayType"}}},
    ],
}
NESTED_ARROW = pa.schema([
    ("key", pa.string()), ("tags", pa.map_(pa.string(), pa.int64())), ("counts", pa.map_(pa.int64(), pa.string())),
    ("blobs", pa.map_(pa.binary(), pa.binary())), ("nums", pa.list_(pa.int32())), ("parts", pa.list_(pa.binary())),
])


def nested_rows(n: int) -> pa.Table:
    rnd = random.Random(9)
    rows = []
    for i in range(n):
        rows.append({
            "key": f"k{i:05d}",
            "tags": None if i % 7 == 0 else [(f"t{j}", rnd.randrange(-5, 5)) for j in range(rnd.randrange(4))],
            "counts": [(rnd.randrange(-(2**40), 2**40), f"c{i}")] if i % 3 else [],
            "blobs": [(bytes([i % 256, 0xFF]), bytes([0, i % 7]))] if i % 2 else None,
            "nums": None if i % 5 == 0 else [rnd.randrange(-(2**31), 2**31) for _ in range(rnd.randrange(3))],
            "parts": [b"", bytes([0x80, i % 256])] if i % 4 else [],
        })
    return pa.Table.from_pylist(rows, schema=NESTED_ARROW)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_map_and_list_values_round_trip_exactly(sleeper, input_dir, fmt):
    data = nested_rows(500)
    t = sleeper.create_table("t", NESTED_SCHEMA, split_points=["k00250"])

    t.ingest([WRITERS[fmt](input_dir / f"in.{fmt}", data)])

    got = everything(t)
    assert got.schema.field("tags").type == pa.map_(pa.string(), pa.int64())
    assert got.schema.field("parts").type == pa.list_(pa.binary())
    assert row_counter(got, data.column_names) == row_counter(data)


def test_csv_cannot_carry_map_or_list_fields_and_says_which(sleeper, input_dir):
    t = sleeper.create_table("t", NESTED_SCHEMA)
    path = input_dir / "in.csv"
    path.write_text("key,tags,counts,blobs,nums,parts\n")
    with pytest.raises(IngestError, match="'tags'"):
        t.ingest([str(path)])
    assert_nothing_committed(sleeper, t)


# ----- bad input is refused, and nothing is committed ------------------------------------------

def _good_rows(n: int = 5) -> list[dict]:
    return [{"key": i, "ts": i, "id": i, "name": f"n{i}", "blob": base64.b64encode(bytes([i])).decode()}
            for i in range(n)]


def _csv_text(rows: list[dict], header: list[str] | None = None) -> str:
    header = header or list(rows[0])
    lines = [",".join(header)] + [",".join("" if r.get(h) is None else str(r.get(h)) for h in header) for r in rows]
    return "\n".join(lines) + "\n"


def _jsonl_text(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _parquet_without(column: str) -> pa.Table:
    return base_rows(20).drop_columns([column])


def _with_row(rows: list[dict], i: int, **changes: Any) -> list[dict]:
    out = [dict(r) for r in rows]
    out[i].update(changes)
    return out


def _without_key(rows: list[dict], name: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k != name} for r in rows]


BAD_INPUTS = [
    ("parquet-missing-column", "in.parquet", lambda: _parquet_without("name"), "name"),
    ("csv-missing-column", "in.csv", lambda: _csv_text(_without_key(_good_rows(), "name")), "name"),
    ("jsonl-missing-key-column", "in.jsonl", lambda: _jsonl_text(_without_key(_good_rows(), "key")), "key"),
    ("parquet-extra-column", "in.parquet", lambda: base_rows(20).append_column("extra", pa.array(range(20))), "extra"),
    ("csv-extra-column", "in.csv", lambda: _csv_text([{**r, "extra": 1} for r in _good_rows()]), "extra"),
    ("jsonl-extra-column", "in.jsonl", lambda: _jsonl_text(_with_row(_good_rows(), 3, extra=1)), "extra"),
    ("csv-string-in-long-column", "in.csv", lambda: _csv_text(_with_row(_good_rows(), 3, key="abc")), "key"),
    ("csv-string-in-long-sort-key", "in.csv", lambda: _csv_text(_with_row(_good_rows(), 0, ts="x1")), "ts"),
    ("parquet-string-in-long-column", "in.parquet",
     lambda: base_rows(20).set_column(0, "key", pa.array([str(i) for i in range(20)])), "key"),
    ("parquet-double-in-long-column", "in.parquet",
     lambda: base_rows(20).set_column(2, "id", pa.array([float(i) for i in range(20)])), "id"),
    ("parquet-long-in-string-column", "in.parquet",
     lambda: base_rows(20).set_column(3, "name", pa.array(range(20), pa.int64())), "name"),
    ("jsonl-string-in-long-column", "in.jsonl", lambda: _jsonl_text(_with_row(_good_rows(), 2, id="7")), "id"),
    ("jsonl-number-in-string-column", "in.jsonl", lambda: _jsonl_text(_with_row(_good_rows(), 2, name=7)), "name"),
    ("parquet-null-key", "in.parquet",
     lambda: base_rows(20).set_column(0, "key", pa.array([None if i == 5 else i for i in range(20)], pa.int64())),
     "key"),
    ("parquet-null-sort-key", "in.parquet",
     lambda: base_rows(20).set_column(1, "ts", pa.array([None if i == 5 else i for i in range(20)], pa.int64())),
     "ts"),
    ("csv-null-key", "in.csv", lambda: _csv_text(_with_row(_good_rows(), 4, key=None)), "key"),
    ("jsonl-null-key", "in.jsonl", lambda: _jsonl_text(_with_row(_good_rows(), 1, key=None)), "key"),
    ("csv-bytes-not-base64", "in.csv", lambda: _csv_text(_with_row(_good_rows(), 1, blob="!!not base64!!")), "blob"),
]


@pytest.mark.parametrize("filename,make,column", [pytest.param(f, m, c, id=i) for i, f, m, c in BAD_INPUTS])
def test_bad_input_is_refused_naming_the_column_and_nothing_is_committed(sleeper, input_dir, filename, make, column):
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[3])
    content = make()
    path = input_dir / filename
    if isinstance(content, pa.Table):
        pq.write_table(content, path)
    else:
        path.write_text(content)

    with pytest.raises(IngestError) as e:
        t.ingest([str(path)])

    assert f"'{column}'" in str(e.value), f"message does not name column {column!r}: {e.value}"
    assert "\n" not in str(e.value)
    assert_nothing_committed(sleeper, t)


def test_int_type_value_out_of_range_is_refused_naming_the_column(sleeper, input_dir):
    schema = {"rowKeyFields": [{"name": "key", "type": "LongType"}],
              "valueFields": [{"name": "small", "type": "IntType"}]}
    t = sleeper.create_table("t", schema)
    path = write_parquet(input_dir / "in.parquet", pa.table({"key": pa.array([1, 2], pa.int64()),
                                                            "small": pa.array([1, 2**40], pa.int64())}))
    with pytest.raises(IngestError, match="'small'"):
        t.ingest([path])
    assert_nothing_committed(sleeper, t)


def test_parquet_columns_of_other_widths_and_encodings_of_the_same_kind_are_accepted(sleeper, input_dir):
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[2])
    data = pa.table({
        "key": pa.array([3, 1, 2], pa.int32()),
        "ts": pa.array([7, 8, 9], pa.uint8()),
        "id": pa.array([0, 1, 2], pa.int16()),
        "name": pa.array(["x", "y", "x"]).dictionary_encode(),
        "blob": pa.array([b"\x00", b"", None], pa.large_binary()),
    })
    t.ingest([write_parquet(input_dir / "in.parquet", data)])
    got = everything(t)
    assert got.schema.field("key").type == pa.int64() and got.schema.field("name").type == pa.string()
    assert got.to_pylist() == [{"key": 1, "ts": 8, "id": 1, "name": "y", "blob": b""},
                               {"key": 2, "ts": 9, "id": 2, "name": "x", "blob": None},
                               {"key": 3, "ts": 7, "id": 0, "name": "x", "blob": b"\x00"}]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_int_type_value_out_of_range_in_text_input_is_refused_naming_the_column(sleeper, input_dir, fmt):
    schema = {"rowKeyFields": [{"name": "key", "type": "LongType"}],
              "valueFields": [{"name": "small", "type": "IntType"}]}
    t = sleeper.create_table("t", schema)
    path = input_dir / f"in.{fmt}"
    if fmt == "csv":
        path.write_text("key,small\n1,5\n2,3000000000\n")
    else:
        path.write_text('{"key": 1, "small": 5}\n{"key": 2, "small": 3000000000}\n')
    with pytest.raises(IngestError, match="'small'"):
        t.ingest([str(path)])
    assert_nothing_committed(sleeper, t)


def _garbage_parquet(d: Path) -> str:
    (d / "garbage.parquet").write_text("this is not a parquet file")
    return str(d / "garbage.parquet")


def _missing(d: Path) -> str:
    return str(d / "does-not-exist.parquet")


def _unknown_extension(d: Path) -> str:
    (d / "data.txt").write_text("key,ts,id,name,blob\n1,1,1,a,AA==\n")
    return str(d / "data.txt")


def _directory(d: Path) -> str:
    (d / "dir.parquet").mkdir()
    return str(d / "dir.parquet")


def _not_utf8_jsonl(d: Path) -> str:
    (d / "latin1.jsonl").write_bytes(b'{"key": 1, "ts": 1, "id": 1, "name": "caf\xe9", "blob": "AA=="}\n')
    return str(d / "latin1.jsonl")


@pytest.mark.parametrize("make", [_garbage_parquet, _missing, _unknown_extension, _directory, _not_utf8_jsonl],
                         ids=["garbage-parquet", "missing-file", "unknown-extension", "directory", "jsonl-not-utf8"])
def test_unreadable_input_is_refused_naming_the_file_and_nothing_is_committed(sleeper, input_dir, make):
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[3])
    path = make(input_dir)
    with pytest.raises(IngestError) as e:
        t.ingest([path])
    assert Path(path).name in str(e.value)
    assert_nothing_committed(sleeper, t)


@pytest.mark.parametrize("make", [_garbage_parquet, _missing, _unknown_extension],
                         ids=["garbage-parquet", "missing-file", "unknown-extension"])
def test_a_bad_file_after_good_ones_commits_nothing_from_any(sleeper, input_dir, make):
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[500])
    good = [write_parquet(input_dir / "good.parquet", base_rows(2000)),
            write_csv(input_dir / "good.csv", base_rows(2000, seed=2))]
    with pytest.raises(IngestError):
        t.ingest([*good, make(input_dir)], max_chunk_rows=1000)
    assert_nothing_committed(sleeper, t)


def test_a_bad_row_after_spilled_chunks_commits_nothing(sleeper, input_dir):
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[500])
    good = write_parquet(input_dir / "good.parquet", base_rows(5000))
    bad = input_dir / "bad.csv"
    bad.write_text(_csv_text(_with_row(_good_rows(50), 40, key="oops")))
    with pytest.raises(IngestError, match="'key'"):
        t.ingest([good, str(bad)], max_chunk_rows=1000)
    assert_nothing_committed(sleeper, t)


@pytest.mark.parametrize("max_chunk_rows", [4_000_000, 1000], ids=["in-memory", "spilled"])
def test_a_refused_commit_leaves_no_data_files_behind(tmp_path, input_dir, max_chunk_rows):
    s = Sleeper(state_store=RefusingStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    t = s.create_table("t", BASE_SCHEMA, split_points=[500])
    path = write_parquet(input_dir / "in.parquet", base_rows(5000))
    with pytest.raises(CommitConflictError):
        t.ingest([path], max_chunk_rows=max_chunk_rows)
    assert_nothing_committed(s, t)


# ----- bounded memory: chunks spill to disk and merge ---------------------------------------

def test_ingest_with_tiny_chunks_spills_and_returns_every_record_once_in_order(sleeper, input_dir):
    n = 20_000
    data = base_rows(n, seed=4, key_range=5000)
    t = sleeper.create_table("t", BASE_SCHEMA, split_points=[1000, 2500])
    paths = [write_parquet(input_dir / "a.parquet", data.slice(0, 12_000)),
             write_jsonl(input_dir / "b.jsonl", data.slice(12_000))]

    result = t.ingest(paths, max_chunk_rows=1000)

    assert result.records == n
    assert result.spilled_chunks >= 2, "the chunk limit did not make ingest spill"
    got = everything(t)
    assert sorted(got.column("id").to_pylist()) == list(range(n)), "a record is lost or duplicated"
    assert row_counter(got, data.column_names) == row_counter(data)
    assert_sorted(got, ["key", "ts"], "query result")
    refs = list(t.state().references.values())
    assert len(refs) == 3 and len({r.partition_id for r in refs}) == 3
    assert sum(r.record_count for r in refs) == n
    for r in refs:
        assert_sorted(read_data_file(sleeper, r.filename), ["key", "ts"], r.filename)


def test_ingest_chunks_hold_at_most_max_chunk_rows(sleeper, input_dir):
    t = sleeper.create_table("t", BASE_SCHEMA)
    path = write_parquet(input_dir / "in.parquet", base_rows(20_000))
    result = t.ingest([path], max_chunk_rows=1000)
    assert result.spilled_chunks >= 20


# ----- outputs are named in the job record before they are written -------------------------

class NamingStateStore(InMemoryStateStore):
    """An in-memory store that remembers every key a saved job record names, and can
    refuse to save a record that names outputs."""

    def __init__(self, refuse_naming: bool = False) -> None:
        super().__init__()
        self.named: set[str] = set()
        self.refuse_naming = refuse_naming

    def put_job(self, record):  # type: ignore[no-untyped-def]
        outputs = set(record.outputs)
        if outputs and self.refuse_naming:
            raise ConnectionError("state store lost while saving the job record")
        super().put_job(record)
        self.named |= outputs


class CheckedObjectStore(ObjectStore):
    """Refuses to write a data file or sketch that no saved job record names."""

    def __init__(self, root: str, state_store: NamingStateStore) -> None:
        super().__init__(root)
        self.state_store = state_store

    def open_output(self, key):  # type: ignore[no-untyped-def]
        data_key = key.rsplit(".sketches", 1)[0] + ".parquet" if key.endswith(".sketches") else key
        assert data_key in self.state_store.named, f"{key} written before a saved job record named it"
        return super().open_output(key)


@pytest.mark.parametrize("max_chunk_rows", [4_000_000, 1000], ids=["in-memory", "spilled"])
def test_every_output_is_named_in_a_saved_job_record_before_it_is_written(tmp_path, input_dir, max_chunk_rows):
    store = NamingStateStore()
    s = Sleeper(state_store=store, objects=CheckedObjectStore(str(tmp_path / "data"), store))
    t = s.create_table("t", BASE_SCHEMA, split_points=[200, 400, 600, 800])
    path = write_parquet(input_dir / "in.parquet", base_rows(5000))

    result = t.ingest([path], max_chunk_rows=max_chunk_rows)

    assert len(result.files) == 5
    assert sum(r.record_count for r in t.state().references.values()) == 5000


@pytest.mark.parametrize("max_chunk_rows", [4_000_000, 1000], ids=["in-memory", "spilled"])
def test_a_job_record_that_cannot_be_saved_leaves_nothing_written(tmp_path, input_dir, max_chunk_rows):
    store = NamingStateStore(refuse_naming=True)
    s = Sleeper(state_store=store, objects=CheckedObjectStore(str(tmp_path / "data"), store))
    t = s.create_table("t", BASE_SCHEMA, split_points=[200, 400, 600, 800])
    path = write_parquet(input_dir / "in.parquet", base_rows(5000))

    with pytest.raises(ConnectionError, match="state store lost"):
        t.ingest([path], max_chunk_rows=max_chunk_rows)

    assert_nothing_committed(s, t)
