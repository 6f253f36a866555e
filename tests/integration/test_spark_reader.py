"""The Spark data source ``spark.read.format("sleeper")`` on ``local[2]`` (in this process's
SparkSession), against the embedded PostgreSQL, on local disk and on S3 through moto's
server with no Hadoop jars. Answers are compared with a plain Python model of what was
ingested: a list of every record."""

from __future__ import annotations

from collections import Counter

import pytest

from sleeper_ops.spark.batch_files import write_config_file
from statestore.partitions import split_children
from statestore.transactions import SplitPartition
from tests.integration import test_spark_compaction as spark_tests
from tests.integration.test_spark_compaction import BUCKET, SCHEMA, open_sleeper, rows

moto_endpoint = spark_tests.moto_endpoint  # the fixture: a moto S3 server on 127.0.0.1 with the bucket

pytestmark = [pytest.mark.integration, pytest.mark.slow]

Record = tuple[int, int, int, str]


def _records(table) -> list[Record]:  # type: ignore[no-untyped-def]
    return [(r["key"], r["ts"], r["id"], r["name"]) for r in table.to_pylist()]


def _collect(df) -> Counter:  # type: ignore[no-untyped-def]
    return Counter((r.key, r.ts, r.id, r.name) for r in df.collect())


def _three_leaves_with_ancestor_files(s) -> tuple[object, list[Record]]:  # type: ignore[no-untyped-def]
    """A table whose root holds 2 files, split at 5000 into L and R; L holds a file and is
    split at 2500 into LL and LR; then every leaf gets a file. Leaves: LL, LR, R."""
    t = s.create_table("events", SCHEMA)
    model: list[Record] = []

    def ingest(n: int, seed: int, bounds: tuple[int, ...] = ()) -> None:
        """One ingest per leaf (``bounds``: the split points), so each leaf's file is its own
        (one ingest over several leaves would write one file they share)."""
        data = rows(n, seed=seed, first_id=seed * 100_000)
        keys = data.column("key").to_pylist()
        edges = (None, *bounds, None)
        for lo, hi in zip(edges, edges[1:]):
            part = data.filter([(lo is None or k >= lo) and (hi is None or k < hi) for k in keys])
            if part.num_rows:
                t.ingest(part)
        model.extend(_records(data))

    ingest(1500, 1)
    ingest(1500, 2)
    tid = t.info.table_id
    s.state_store.commit(tid, SplitPartition(*split_children(t.state().partitions["root"], 0, 5000, "L", "R")))
    ingest(1000, 3, (5000,))  # one file in L, one in R
    s.state_store.commit(tid, SplitPartition(*split_children(t.state().partitions["L"], 0, 2500, "LL", "LR")))
    ingest(1000, 4, (2500, 5000))  # one file each in LL, LR, R
    return t, model


def test_a_table_reads_as_exactly_its_records_with_one_input_partition_per_leaf(spark, tmp_path, pg_dsn):
    home = tmp_path / "home"
    with open_sleeper(home, pg_dsn) as s:
        t, model = _three_leaves_with_ancestor_files(s)
        state = t.state()
        assert {r.partition_id for r in state.references.values()} == {"root", "L", "LL", "LR", "R"}

        df = spark.read.format("sleeper").option("table", "events").option("home", str(home)).load()

        assert df.columns == ["key", "ts", "id", "name"]
        assert df.rdd.getNumPartitions() == 3, "one input partition per leaf: LL, LR, R"
        assert df.count() == len(model) == 5000
        assert _collect(df) == Counter(model), "every record exactly once, ancestors' files included"


def test_key_filters_read_only_the_matching_leaves_and_exactly_the_matching_rows(spark, tmp_path, pg_dsn):
    home = tmp_path / "home"
    with open_sleeper(home, pg_dsn) as s:
        t, model = _three_leaves_with_ancestor_files(s)
        load = spark.read.format("sleeper").option("table", "events").option("home", str(home)).load

        def check(where: str, keep, leaves: int) -> None:  # type: ignore[no-untyped-def]
            df = load().where(where)
            assert df.rdd.getNumPartitions() == leaves, f"{where}: {leaves} leaves planned"
            expected = Counter(r for r in model if keep(r))
            assert _collect(df) == expected and expected, where

        check("key >= 6000 AND key < 6200", lambda r: 6000 <= r[0] < 6200, 1)
        check("key > 2400 AND key <= 2600", lambda r: 2400 < r[0] <= 2600, 2)
        a, b, c = (min(r[0] for r in model if lo <= r[0] < hi) for lo, hi in ((0, 2500), (2500, 5000), (5000, 10**6)))
        check(f"key IN ({a}, {b}, {c})", lambda r: r[0] in (a, b, c), 3)
        check(f"key = {c}", lambda r: r[0] == c, 1)
        check("key < 2500 AND name LIKE 'n1%'", lambda r: r[0] < 2500 and r[2] // 100_000 == 1, 1)
        check(f"key = {a} OR key = {c}", lambda r: r[0] in (a, c), 3)  # OR: not pushed, Spark filters
        assert load().where("key > 9999999").rdd.getNumPartitions() == 1  # nothing to read: one empty partition
        assert load().where("key > 9999999").count() == 0

        # Files only the other leaves reference are gone: a read of R alone still works.
        state = t.state()
        for r in state.references.values():
            if r.partition_id in ("L", "LL", "LR"):
                s.objects.delete(r.filename)
        check("key >= 5000", lambda r: r[0] >= 5000, 1)
        with pytest.raises(Exception, match="(?i)not found|no such file|does not exist"):
            load().where("key < 5000").count()


def _aggregated(model: list[Record]) -> Counter:
    """``sum(id),max(name)`` per (key, ts), as the table's aggregation iterator gives."""
    groups: dict[tuple[int, int], tuple[int, str]] = {}
    for key, ts, id_, name in model:
        old = groups.get((key, ts))
        groups[(key, ts)] = (id_, name) if old is None else (old[0] + id_, max(old[1], name))
    return Counter((k, ts, i, n) for (k, ts), (i, n) in groups.items())


def test_a_table_on_s3_reads_through_pyarrow_with_no_hadoop_jars_and_its_iterators_applied(
        spark, tmp_path, pg_dsn, moto_endpoint):
    endpoint, client = moto_endpoint
    store = {"uri": f"s3://{BUCKET}/tables", "endpoint_override": endpoint, "scheme": "http",
             "region": "us-east-1", "access_key": "test", "secret_key": "test"}
    with open_sleeper(tmp_path / "home", pg_dsn, store, toml=False) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000],
                           properties={"sleeper.table.iterator.aggregation": "sum(id),max(name)"})
        model: list[Record] = []
        for i in range(3):
            data = rows(1500, seed=i, first_id=i * 100_000)
            t.ingest(data)
            model.extend(_records(data))
        files = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="tables/").get("Contents", [])}
        assert all(f"tables/{r.filename}" in files for r in t.state().references.values()), "data on S3"
        config_file = tmp_path / "sleeper-config.toml"
        assert s.config is not None
        write_config_file(config_file, s.config)

        df = spark.read.format("sleeper").option("table", "events").option("config_file", str(config_file)).load()

        assert not spark.conf.get("spark.jars", ""), "no extra jars"
        assert df.rdd.getNumPartitions() == 2
        expected = _aggregated(model)
        assert sum(expected.values()) < len(model), "some records share a key: the iterator has work to do"
        assert _collect(df) == expected
        assert _collect(df.where("key < 5000")) == Counter({r: n for r, n in expected.items() if r[0] < 5000})


def test_buffered_records_are_read_in_every_leaf_even_leaves_with_no_files(spark, tmp_path, pg_dsn):
    """Issue 18 finding 7: only leaves with a file reference were planned, so records still
    in the write buffer were missed in the others. A new table of three leaves gets its
    records through the write buffer only (no file anywhere), then some files too."""
    home = tmp_path / "home"
    with open_sleeper(home, pg_dsn) as s:
        t = s.create_table("events", SCHEMA, split_points=[2500, 5000])
        buffered = rows(900, seed=7, first_id=0)
        t.write(buffered)
        assert t.state().files == {}, "nothing is in a file yet"
        load = spark.read.format("sleeper").option("table", "events").option("home", str(home)).load

        df = load()

        assert df.rdd.getNumPartitions() == 3, "every leaf is read"
        model = _records(buffered)
        assert _collect(df) == Counter(model) and len(model) == 900
        assert _collect(load().where("key >= 5000")) == Counter(r for r in model if r[0] >= 5000)
        filed = rows(300, seed=8, first_id=100_000)
        t.ingest(filed)  # files in the leaves; the buffer still holds its records
        assert _collect(load()) == Counter(model + _records(filed))
