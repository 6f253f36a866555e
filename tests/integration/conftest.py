"""Fixtures shared by integration modules, once per worker: a local Spark session, and
a migrated AIRFLOW_HOME that the DAG tests share through one DAG server.

The modules that use them run on one worker, one after another (they form one unit in
tests/scheduling.py), so the session's JVM and Airflow's start-up are paid once."""

from __future__ import annotations

import shutil
from pathlib import Path
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


@pytest.fixture(scope="session")
def migrated_airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An AIRFLOW_HOME holding the run's migrated database (tests/airflow_db.py), copied per test."""
    from tests.airflow_db import seed_home

    return seed_home(tmp_path_factory.mktemp("airflow-template"), tmp_path_factory)


@pytest.fixture(scope="session")
def airflow_home(migrated_airflow_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated AIRFLOW_HOME (SQLite) that the DAG tests of this worker share, one after
    another, through one DAG server: each test's runs are its own (their own run ids,
    tables in the test's own Sleeper home), and a rerun at a logical date replaces the
    earlier run, as ``dag.test()`` does."""
    home = tmp_path_factory.mktemp("airflow-shared") / "airflow"
    shutil.copytree(migrated_airflow_home, home)
    return home
