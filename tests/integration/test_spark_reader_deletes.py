"""The Spark data source hides deleted records (issue 22) at once: of files, of the write
buffer, with a predicate; records written after the delete are read."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.test_spark_compaction import SCHEMA, open_sleeper, rows
from tests.integration.test_spark_reader import _collect, _records

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_spark_reader_hides_deleted_records_of_files_and_buffer(spark, tmp_path, pg_dsn):
    home = tmp_path / "home"
    with open_sleeper(home, pg_dsn) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000])
        filed, buffered = rows(600, seed=1, first_id=0), rows(200, seed=2, first_id=10_000)
        t.ingest(filed)
        t.write(buffered)
        t.delete(ranges=[(2000, 7000)], where="id % 2 = 0")
        later = rows(100, seed=3, first_id=20_000)
        t.ingest(later)
        model = [r for r in _records(filed) + _records(buffered)
                 if not (2000 <= r[0] < 7000 and r[2] % 2 == 0)] + _records(later)
        df = spark.read.format("sleeper").option("table", "events").option("home", str(home)).load()
        assert _collect(df) == Counter(model)
        assert _collect(df.where("key >= 5000")) == Counter(r for r in model if r[0] >= 5000)


def test_the_spark_reader_as_of_before_a_delete_reads_the_deleted_records_and_no_buffer(spark, tmp_path, pg_dsn):
    home = tmp_path / "home"
    with open_sleeper(home, pg_dsn) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000])
        filed = rows(400, seed=4, first_id=0)
        t.ingest(filed)
        t.write(rows(50, seed=5, first_id=10_000))  # in the buffer: never part of an as-of read
        before = t.history(1)[0].number
        t.delete(ranges=[(0, None)])
        t.ingest(rows(30, seed=6, first_id=20_000))
        reader = spark.read.format("sleeper").option("table", "events").option("home", str(home))
        assert _collect(reader.option("asOf", str(before)).load()) == Counter(_records(filed))
        assert _collect(reader.option("asOf", str(before)).load().where("key < 5000")) == \
            Counter(r for r in _records(filed) if r[0] < 5000)
        with pytest.raises(Exception, match="no transaction 1 in its history"):
            reader.option("asOf", "1").load().collect()
