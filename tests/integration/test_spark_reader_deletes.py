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
