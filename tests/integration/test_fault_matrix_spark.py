"""Issue 33's Spark cells of the fault matrix: bulk import, Spark compaction and export,
each run on a standalone master (two workers) with its state-store write faulted, on
PostgreSQL and on DynamoDB.

* PostgreSQL, behind :class:`~tests.faults.commit_proxy.CommitDroppingProxy`: ``lost``
  (the server committed, its reply dropped: the proxy's ``applied`` count says it did)
  and ``cut`` (the connection cut before the COMMIT reached the server: nothing
  applied, the client cannot tell);
* DynamoDB (moto behind :class:`~tests.faults.aws_proxy.FaultProxy`): ``lost`` (the
  transaction applied, its reply dropped) and ``throttle`` (ThrottlingException, twice).

The faulted write is the job's commit (bulk import, compaction: the driver's data
commit; export: the claim of its key, the one state-store write that precedes its
files). A command that fails is run again with the same key (import key, export key; a
compaction job is retried by the next run), as Airflow's retry would. Each cell ends
with exact counts: every record once (the table's, or the export's files' against the
table), each armed rule fired its own count, and no object left that nothing names
(the export's destination holds exactly its manifest's files; the table's data prefix
exactly the referenced files after GC judged days ahead).

A Spark job costs a JVM start, so ``make test`` runs one cell a path (its backend and
fault drawn from the run's seed: ``SLEEPER_SPARK_CELL_SEED``, else the run's hypothesis
seed, printed; the same seed replays
the same cells); ``SLEEPER_SPARK_CELLS=all`` runs all 12 cells. The result table is
printed at the end of the module.
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow.parquet as pq
import pytest
import tomli_w

from statestore.clock import now_ms
from tests.faults.aws_proxy import FaultProxy
from tests.faults.commit_proxy import CommitDroppingProxy
from tests.integration.statestore.conftest import moto_with_bucket
from tests.integration.test_spark_compaction import BASIC, SCHEMA, rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PATHS = ("bulk_import", "compaction", "export")
FAULTS = {"postgres": ("lost", "cut"), "dynamodb": ("lost", "throttle")}
#: the run's seed (conftest sets SLEEPER_HYPOTHESIS_SEED once per run: every xdist worker collects the same cells)
SEED = int(os.environ.get("SLEEPER_SPARK_CELL_SEED") or os.environ.get("SLEEPER_HYPOTHESIS_SEED")
           or random.randrange(1 << 32))
ALL = os.environ.get("SLEEPER_SPARK_CELLS") == "all"
print(f"Spark fault cells: seed {SEED} (SLEEPER_SPARK_CELL_SEED={SEED} replays it)", file=sys.stderr)
#: DynamoDB: the body of each path's faulted write (a log item's type; the export key's claim)
DYNAMO_WRITE = {"bulk_import": b'"add_files"', "compaction": b'"replace_file_references"', "export": b'"w#'}
#: PostgreSQL: what each path's faulted transaction sends before its COMMIT
PG_WRITE = {"bulk_import": b"INSERT INTO state_changes", "compaction": b"INSERT INTO state_changes",
            "export": b"INSERT INTO client_writes"}
DAYS_AHEAD_MS = 3 * 24 * 3600 * 1000
PROPERTIES = {**BASIC, "sleeper.table.gc.delay.minutes": "1", "sleeper.table.gc.orphan.grace.minutes": "10",
              "sleeper.table.gc.job.abandon.minutes": "10", "sleeper.table.compaction.job.retry.minutes": "1",
              "sleeper.table.bulk.import.min.leaf.partitions": "2"}
RESULTS: list[str] = []


def _cells() -> list[tuple[str, str, str]]:
    every = [(path, backend, fault) for path in PATHS for backend, faults in FAULTS.items() for fault in faults]
    if ALL:
        return every
    rnd = random.Random(SEED)
    return [rnd.choice([c for c in every if c[0] == path]) for path in PATHS]


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.spark_cluster import standalone_cluster

    yield from standalone_cluster(tmp_path_factory.mktemp("spark-faults"), cores=1, memory="1g", workers=2)
    print("\nSpark fault cells (path x backend x fault -> runs, lost, doubled, stray):\n" + "\n".join(RESULTS))


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    with moto_with_bucket("sleeper-spark-faults") as url:
        yield url


@pytest.fixture(scope="module")
def spark_session() -> Iterator[None]:
    """The export runner makes its own session on the configuration's master (as
    ``sleeper export --runner spark`` does); it is stopped when the module ends."""
    yield
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


class _Faults:
    """One backend's fault injection: arm the path's write, then how many fired."""

    def __init__(self, backend: str, arm: Callable[[str, str], None], fired: Callable[[], dict[str, int]]) -> None:
        self.backend, self.arm, self.fired = backend, arm, fired


@pytest.fixture
def store(request: pytest.FixtureRequest, tmp_path: Path, master: str) -> Iterator[tuple[Path, _Faults]]:
    """A home (sleeper.toml on the standalone master, data on local disk) whose state
    store is reached through the backend's fault proxy."""
    backend = request.param
    home = tmp_path / "home"
    home.mkdir()
    if backend == "postgres":
        pg_dsn = request.getfixturevalue("pg_dsn")
        proxy, dsn = CommitDroppingProxy.for_dsn(pg_dsn)
        state: dict[str, Any] = {"backend": "postgres", "dsn": dsn}

        def pg_arm(path: str, fault: str) -> None:
            proxy.arm(after=fault == "lost", marker=PG_WRITE[path])

        def pg_fired() -> dict[str, int]:
            proxy.disarm()
            return {"drops": proxy.drops, "applied": proxy.applied}

        faults = _Faults(backend, pg_arm, pg_fired)
        closer: Callable[[], None] = proxy.close
    else:
        moto = request.getfixturevalue("moto")
        aws = FaultProxy(moto, seed=SEED).__enter__()
        state = {"backend": "dynamodb", "endpoint_url": aws.url, "region": "us-east-1",
                 "table_prefix": f"s{uuid.uuid4().hex[:8]}-", "access_key": "test", "secret_key": "test"}
        rules: list[Any] = []

        def ddb_arm(path: str, fault: str) -> None:
            rules.append(aws.inject(fault, operation="TransactWriteItems",
                                    body=DYNAMO_WRITE[path], times=1 if fault == "lost" else 2))

        def ddb_fired() -> dict[str, int]:
            aws.clear()
            return {"fired": sum(r.fired for r in rules)}

        faults = _Faults(backend, ddb_arm, ddb_fired)

        def closer() -> None:
            aws.__exit__(None, None, None)
    (home / "sleeper.toml").write_text(tomli_w.dumps({"object_store": {"uri": "data"}, "state_store": state,
                                                      "spark": {"master": master}}))
    try:
        yield home, faults
    finally:
        closer()


def _ids(t: Any) -> Counter[int]:
    return Counter(t.query(ranges=[(-(2**63), None)]).column("id").to_pylist())


def _expected_fired(backend: str, fault: str) -> dict[str, int]:
    if backend == "postgres":
        return {"drops": 1, "applied": 1 if fault == "lost" else 0}
    return {"fired": 1 if fault == "lost" else 2}


@pytest.mark.parametrize("store,path,fault", [pytest.param(b, p, f, id=f"{p}-{b}-{f}") for p, b, f in _cells()],
                         indirect=["store"])
def test_a_spark_job_whose_state_store_write_is_faulted_and_run_again_loses_and_doubles_nothing(
        store: tuple[Path, _Faults], path: str, fault: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    from sleeper_ops import Sleeper

    home, faults = store
    runs = 0
    with Sleeper(home=home) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000], properties=PROPERTIES)
        if path == "bulk_import":
            raw = tmp_path / "raw"
            raw.mkdir()
            data = rows(3000, seed=7, first_id=0)
            pq.write_table(data, raw / "part-0.parquet")
            expected = Counter(data.column("id").to_pylist())

            def run() -> Any:
                return t.bulk_import([str(raw)], import_key="day-1", run_id=f"r{runs}")
        else:
            for i in range(3):  # 3 files a leaf: a compaction job in each leaf
                t.ingest(rows(1000, seed=i, first_id=i * 10_000))
            expected = _ids(t)
            if path == "compaction":
                def run() -> Any:
                    return t.compact("spark", run_id=f"r{runs}", retry_after_minutes=0)
            else:
                request.getfixturevalue("spark_session")
                dest = tmp_path / "out"

                def run() -> Any:
                    return t.export(str(dest), runner="spark", export_key="x-1", run_id=f"r{runs}")
        faults.arm(path, fault)
        outcome = None
        for _ in range(3):  # the first run meets the fault; a retry (same key) must finish the work
            runs += 1
            try:
                outcome = run()
            except Exception as e:  # a failed run: Airflow would run it again
                outcome = e
                continue
            if path != "compaction" or all(r.status == "committed" for r in outcome.results):
                break
        assert faults.fired() == _expected_fired(faults.backend, fault), f"the {fault} fault fired as armed"
        assert not isinstance(outcome, Exception), f"{path} never succeeded after {runs} runs: {outcome!r}"

        got = _ids(t)
        doubled = {k: n for k, n in got.items() if n > 1}
        lost = set(expected) - set(got)
        stray: list[str] = []
        if path == "export":
            from sleeper_ops.io.storage import ObjectStore
            from sleeper_ops.query.export import rows_of

            m = outcome.manifest
            exported = Counter(rows_of(ObjectStore(str(dest)), m).column("id").to_pylist())
            doubled.update({k: n for k, n in exported.items() if n > 1})
            lost |= set(expected) - set(exported)
            stray = sorted({p.name for p in dest.iterdir()} - {"_manifest.json", *(f.key for f in m.files)})
        else:
            t.gc(now_ms=now_ms() + DAYS_AHEAD_MS)
            t.gc(now_ms=now_ms() + DAYS_AHEAD_MS, orphans=True)
            tracked = set(t.state().files)
            stray = sorted(o.key for o in s.objects.list(t.info.table_id)
                           if o.key.endswith(".parquet") and o.key not in tracked)
        RESULTS.append(f"  {path:<12} {faults.backend:<9} {fault:<9} -> runs {runs}, lost {len(lost)}, "
                       f"doubled {len(doubled)}, stray {len(stray)}")
        assert (len(lost), len(doubled), stray) == (0, 0, []), (sorted(lost)[:10], doubled, stray)
        assert sum(got.values()) == len(expected), "every record of the table exactly once"
        if path == "bulk_import":
            (job,) = t.jobs(kind="bulk_import")
            assert job.status == "committed" and job.rows_written == 3000
