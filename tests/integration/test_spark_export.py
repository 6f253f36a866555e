"""``sleeper export --runner spark`` (issue 22): one Spark task a leaf, each reading its
leaf's plan made on the driver, the files' union equal to the whole-table query
(deletes hidden, buffered records included)."""

from __future__ import annotations

from collections import Counter

import pytest

from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.query.export import rows_of
from tests.integration.test_spark_compaction import SCHEMA, open_sleeper, rows
from tests.integration.test_spark_reader import _records

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_spark_runner_writes_one_file_a_leaf_holding_exactly_the_query_answer(spark, tmp_path, pg_dsn):
    with open_sleeper(tmp_path / "home", pg_dsn) as s:
        t = s.create_table("events", SCHEMA, split_points=[3000, 6000])
        t.ingest(rows(900, seed=1, first_id=0))
        t.write(rows(50, seed=2, first_id=10_000))
        t.delete(ranges=[(1000, 2000)])
        result = t.export(str(tmp_path / "out"), runner="spark", export_key="spark-1")
        m = result.manifest
        assert result.written and len(m.files) == 3
        # the final files carry no attempt id: each winner was moved to its leaf's name, no loser left
        assert all(".attempt-" not in f.key for f in m.files), [f.key for f in m.files]
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(["_manifest.json",
                                                                               *(f.key for f in m.files)])
        expected = t.query(ranges=[(0, None)])
        got = rows_of(ObjectStore(str(tmp_path / "out")), m)
        assert got.num_rows == expected.num_rows == m.rows
        assert Counter(_records(got)) == Counter(_records(expected))
