"""Fixtures shared by integration modules: one local Spark session per worker.

The modules that use ``spark`` run on one worker, one after another (they form one
unit in tests/scheduling.py), so the session and its JVM start once for all of them."""

from __future__ import annotations

from typing import Any, Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the sleeper data source registered; its Python
    workers run this interpreter. Tests must leave it as they found it (no session
    configuration set, no temporary views left)."""
    pytest.importorskip("pyspark.sql")
    from sleeper_ops.spark.datasource import register
    from tests.spark_session import local_session

    with local_session("sleeper-reader-test", **{"spark.sql.shuffle.partitions": "2"}) as session:
        register(session)
        yield session
