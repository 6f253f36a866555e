"""Issue 18's fault matrix: every write path x backend x fault, each ending with exact
counts.

* paths: create table, ingest, buffered write, flush, compaction (local), split, GC,
  ingest batcher, snapshot and expire (DynamoDB only: PostgreSQL keeps no snapshots);
* backends: DynamoDB (moto behind :class:`~tests.faults.aws_proxy.FaultProxy`) and
  PostgreSQL (behind :class:`~tests.faults.commit_proxy.CommitDroppingProxy`), the data
  in S3 (the same moto, behind the same fault proxy) for both, and DynamoDB's snapshots
  and large bodies too;
* faults, each on the path's first state-store write and its first object writes:
  ``lost`` (applied, the reply dropped; on PostgreSQL the connection dropped after
  COMMIT), ``throttle`` (DynamoDB ThrottlingException / S3 503 SlowDown, twice) and
  ``error`` (applied, then 500, twice); on PostgreSQL also ``cut`` (the connection
  cut just before the COMMIT reaches the server: nothing applied, the client cannot
  tell).

A process killed mid-job is covered by ``test_postgres_killed.py``,
``test_compaction_faults.py`` and ``test_write_buffer_faults.py``; Spark paths (bulk
import, Spark compaction) need a Spark session of seconds per case and are covered by
the Spark suites.

Every case ends, through a fresh store reached directly: the table loads; every
acknowledged record is there exactly once; a failed command's records are there
wholly or not at all; the buffer still flushes; and after GC (delays at their floors,
judged at a time days ahead) no orphan remains in the bucket. The table of
path x backend x fault -> runs, lost, doubled, wedged, orphans is printed at the end of
the module (and written to ``fault_matrix.txt`` in pytest's base temp directory). Each
cell asserts each armed rule's own count: the state store's fault fired (and, on
PostgreSQL, the server had committed before its reply was dropped), and the object
store's fault fired on every path that writes objects. A buffered write or an ingest that
fails is sent again with its request id and must then be acknowledged, its records once.

The random ("mixed") rows, seeded and replayable, are in ``test_fault_matrix_mixed.py``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from statestore import Schema
from tests.faults.aws_proxy import FaultProxy
from tests.integration.statestore.conftest import MOTO_CREDENTIALS, serial_moto_server

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "valueFields": [{"name": "value", "type": "LongType"},
                                           {"name": "payload", "type": "StringType"}]})
#: a buffered write this big keeps its bytes in the blob store on DynamoDB (over 350 KB)
BIG_WRITE, PAYLOAD = 2500, 160
BUCKET = "sleeper-fault-matrix"
#: floors of the GC properties, so one GC run judged days ahead removes everything unreferenced
PROPERTIES = {"sleeper.table.gc.delay.minutes": "1", "sleeper.table.gc.orphan.grace.minutes": "10",
              "sleeper.table.compaction.job.retry.minutes": "1", "sleeper.table.gc.job.abandon.minutes": "10",
              "sleeper.table.compaction.strategy": "basic", "sleeper.table.compaction.files.batch.size": "2"}
DAYS_AHEAD_MS = 3 * 24 * 3600 * 1000
PATHS = ["create_table", "ingest", "write", "flush", "compaction", "split", "gc", "batcher", "snapshot"]
ROWS = [*PATHS, "mixed"]  # "mixed": random faults on every write of a mixed workload (test_fault_matrix_mixed.py)
AWS_FAULTS = ["lost", "throttle", "error"]  # the fault proxy's kinds
FAULTS = [*AWS_FAULTS, "cut"]
#: DynamoDB: the body of the path's state-store write (a log item's type, a buffer entry, a catalog name)
DYNAMO_WRITE = {"create_table": b'"name#', "ingest": b'"add_files"', "write": b'"b#', "flush": b'"add_files"',
                "compaction": b'"replace_file_references"', "split": b'"split_partition"',
                "gc": b'"delete_files"', "batcher": b'"add_files"', "snapshot": b'-snapshots"'}
#: PostgreSQL: what the path's commit sends before COMMIT
PG_WRITE = {"create_table": b"INSERT INTO tables", "write": b"INSERT INTO write_buffer", "gc": b"DELETE FROM files"}
#: the paths that write to the object store: on PostgreSQL, throttling and 5xx reach only those
OBJECT_WRITERS = {"ingest", "flush", "compaction", "gc", "batcher"}


@dataclass
class Cell:
    runs: int = 0
    lost: int = 0
    doubled: int = 0
    wedged: int = 0
    orphans: int = 0
    state_faults: int = 0  # the state store's rule: DynamoDB requests failed, PostgreSQL connections cut
    applied: int = 0  # of the PostgreSQL cuts, those after the server had committed
    s3_faults: int = 0
    failed: int = 0  # commands that raised (their records then wholly there or not at all)
    retried: int = 0  # failed writes sent again with their request id (each then acknowledged)


@dataclass
class Matrix:
    cells: dict[tuple[str, str, str], Cell] = field(default_factory=dict)

    def table(self) -> str:
        head = f"{'path':<13} {'backend':<9} {'fault':<9} {'runs':>4} {'lost':>5} {'doubled':>7} {'wedged':>6} " \
               f"{'orphans':>7} {'state faults':>12} {'applied':>7} {'s3 faults':>9} {'cmds failed':>11} " \
               f"{'retried':>7}"
        lines = [head, "-" * len(head)]
        for (path, backend, fault), c in sorted(self.cells.items(), key=lambda kv: (
                ROWS.index(kv[0][0]), kv[0][1], FAULTS.index(kv[0][2]))):
            lines.append(f"{path:<13} {backend:<9} {fault:<9} {c.runs:>4} {c.lost:>5} {c.doubled:>7} {c.wedged:>6} "
                         f"{c.orphans:>7} {c.state_faults:>12} {c.applied:>7} {c.s3_faults:>9} {c.failed:>11} "
                         f"{c.retried:>7}")
        return "\n".join(lines)


@pytest.fixture(scope="module")
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Matrix]:
    m = Matrix()
    yield m
    if not m.cells:
        return
    text = m.table()
    (tmp_path_factory.getbasetemp() / "fault_matrix.txt").write_text(text + "\n")
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line("\nfault matrix (issue 18):\n" + text)


@pytest.fixture(scope="module")
def moto() -> Iterator[str]:
    boto3 = pytest.importorskip("boto3")
    from botocore.retries.standard import ExponentialBackoff

    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        # botocore backs off a throttled request for up to 1 s, then 2 s: 50 ms scale here
        mp.setitem(ExponentialBackoff._DEFAULT_BACKOFF_CONFIG, "throttling_base_scale", 0.05)
        boto3.client("s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=BUCKET)
        yield url


@pytest.fixture(scope="module")
def proxy(moto: str) -> Iterator[FaultProxy]:
    with FaultProxy(moto, seed=18) as p:
        yield p


@pytest.fixture(scope="module")
def dynamo_prefix() -> str:
    return f"fm{uuid.uuid4().hex[:8]}-"


def _s3(url: str) -> Any:
    from sleeper_ops.io.storage import S3Options

    return S3Options(endpoint_override=url[len("http://"):], scheme="http", region="us-east-1",
                     access_key=MOTO_CREDENTIALS["access_key"], secret_key=MOTO_CREDENTIALS["secret_key"])


@dataclass
class Stack:
    """The faulty and the fresh (direct) way to one backend, and how to arm its faults."""

    backend: str
    open_faulty: Callable[[], Any]
    open_fresh: Callable[[], Any]
    arm: Callable[[str, str], None]
    disarm: Callable[[], dict[str, int]]  # each armed rule's faults fired since arming (RULES)


#: the rules a cell arms, each counted on its own: the state store's write (DynamoDB's
#: request rule, or PostgreSQL's dropped connection), of those the PostgreSQL drops the
#: server had committed before the cut ("applied"), and the object writes (S3 rule)
RULES = ("state", "applied", "s3")


def _records(keys: list[str], payload: int = 0) -> pa.Table:
    return pa.table({"key": keys, "value": list(range(len(keys))), "payload": ["p" * payload] * len(keys)},
                    schema=pa.schema([("key", pa.string()), ("value", pa.int64()), ("payload", pa.string())]))


def _keys(tag: str, n: int) -> list[str]:
    return [f"{tag}-{i:04d}" for i in range(n)]


@pytest.fixture(params=["dynamodb", "postgres"])
def stack(request: pytest.FixtureRequest, moto: str, proxy: FaultProxy, dynamo_prefix: str,
          tmp_path: Path) -> Iterator[Stack]:
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore

    root = f"s3://{BUCKET}/{request.param}-{uuid.uuid4().hex[:8]}"
    armed: list[Any] = []  # the proxy's rules of this arming: [state rule or None, S3 rule]

    def s3_rule(path: str, fault: str) -> Any:
        if fault == "cut":
            return None  # a fault of the PostgreSQL connection only
        times = 1 if fault == "lost" else 2
        return proxy.inject(fault, method="DELETE" if path == "gc" else "PUT", path="*", times=times)

    if request.param == "dynamodb":
        from statestore.dynamodb import open_dynamodb

        def dynamo(url: str) -> Any:
            # snapshots, large bodies and buffer blobs in S3 too, through the same proxy
            return open_dynamodb(endpoint_url=url, table_prefix=dynamo_prefix,
                                 object_store=f"s3://{BUCKET}/_statestore-{dynamo_prefix}",
                                 object_store_options={"endpoint_url": url, **MOTO_CREDENTIALS},
                                 retention_margin=0, **MOTO_CREDENTIALS)

        def arm(path: str, fault: str) -> None:
            state = proxy.inject(fault, operation="PutItem" if path == "snapshot" else "TransactWriteItems",
                                 body=DYNAMO_WRITE[path], times=1 if fault == "lost" else 2)
            armed[:] = [state, s3_rule(path, fault)]

        def disarm() -> dict[str, int]:
            proxy.clear()
            return {"state": armed[0].fired, "applied": 0, "s3": armed[1].fired}

        yield Stack("dynamodb",
                    lambda: Sleeper(state_store=dynamo(proxy.url), objects=ObjectStore(root, _s3(proxy.url))),
                    lambda: Sleeper(state_store=dynamo(moto), objects=ObjectStore(root, _s3(moto))), arm, disarm)
        return

    from statestore.postgres import PostgresStateStore
    from tests.faults.commit_proxy import CommitDroppingProxy

    dsn = request.getfixturevalue("pg_dsn")
    pg_proxy, proxied_dsn = CommitDroppingProxy.for_dsn(dsn)
    before = {"drops": 0, "applied": 0}

    def pg_arm(path: str, fault: str) -> None:
        before.update(drops=pg_proxy.drops, applied=pg_proxy.applied)
        if fault in ("lost", "cut"):
            marker = PG_WRITE.get(path, b"INSERT INTO state_changes")
            # a buffered write is one INSERT on an autocommit connection: it commits itself
            pg_proxy.arm(after=fault == "lost", marker=marker, commit=marker if path == "write" else b"COMMIT")
        armed[:] = [None, s3_rule(path, fault)]

    def pg_disarm() -> dict[str, int]:
        proxy.clear()
        pg_proxy.disarm()
        return {"state": pg_proxy.drops - before["drops"], "applied": pg_proxy.applied - before["applied"],
                "s3": 0 if armed[1] is None else armed[1].fired}

    try:
        yield Stack("postgres", lambda: Sleeper(state_store=PostgresStateStore(proxied_dsn),
                                                objects=ObjectStore(root, _s3(proxy.url))),
                    lambda: Sleeper(state_store=PostgresStateStore(dsn), objects=ObjectStore(root, _s3(moto))),
                    pg_arm, pg_disarm)
    finally:
        pg_proxy.close()


# ----- the paths: set up without faults, then the faulty step ---------------------------
@dataclass
class Run:
    """What the path stored: keys acknowledged, and the keys of each command that failed
    (each wholly there or not at all; a failed maintenance command adds an empty set)."""

    table: str
    acked: set[str] = field(default_factory=set)
    failed: list[set[str]] = field(default_factory=list)
    retried: int = 0


def _attempt(run: Run, keys: list[str], step: Callable[[], Any]) -> None:
    try:
        step()
    except Exception:
        run.failed.append(set(keys))
    else:
        run.acked.update(keys)


def _attempt_with_retry(run: Run, keys: list[str], step: Callable[[str], Any]) -> None:
    """Run ``step`` with a request id of its own; when it raises, send it again with the
    same id, as a client does after a lost reply: the retry must be acknowledged, and
    the records then stored exactly once (the checks count them)."""
    request_id = f"req-{uuid.uuid4().hex}"
    try:
        step(request_id)
    except Exception:
        run.retried += 1
        step(request_id)
    run.acked.update(keys)


def run_path(path: str, fault: str, stack: Stack, tmp_path: Path) -> tuple[Run, dict[str, int]]:
    """Set up ``path``'s table without faults, run its step with the faults armed;
    returns what was stored and how many faults each rule fired."""
    from sleeper_ops.ingest.batcher import run_ingest_batcher, submit_ingest_requests

    name = f"{path}-{uuid.uuid4().hex[:6]}"
    run = Run(name)
    props = dict(PROPERTIES)
    if path == "split":
        props["sleeper.table.partition.splitting.threshold"] = "50"
    with stack.open_faulty() as s:
        if path == "create_table":
            stack.arm(path, fault)
            try:
                s.create_table(name, SCHEMA, ["m"], props)
            except Exception:
                run.failed.append(set())
            fired = stack.disarm()
            try:
                table = s.table(name)
            except Exception:
                table = s.create_table(name, SCHEMA, ["m"], props)  # not created: create it again
            _attempt(run, _keys("after", 40), lambda: table.ingest(_records(_keys("after", 40))))
            return run, fired
        table = s.create_table(name, SCHEMA, ["m"], props)
        setup: dict[str, Callable[[], Any]] = {
            "flush": lambda: table.write(_records(_keys("w", 60))),
            "compaction": lambda: [table.ingest(_records(_keys(f"c{i}", 30))) for i in range(2)],
            "split": lambda: table.ingest(_records(_keys("s", 120))),
            "gc": lambda: ([table.ingest(_records(_keys(f"g{i}", 30))) for i in range(2)], table.compact("local")),
            "snapshot": lambda: table.ingest(_records(_keys("n", 40))),
        }
        if path in setup:
            setup[path]()
            run.acked.update(_setup_keys(path))
        if path == "batcher":
            files = []
            for i in range(2):
                f = tmp_path / f"batch{i}.parquet"
                pq.write_table(_records(_keys(f"b{i}", 25)), f)
                files.append(str(f))
            submit_ingest_requests(s, name, files)
        stack.arm(path, fault)
        now = int(time.time() * 1000)
        steps: dict[str, Callable[[], Any]] = {
            "ingest": lambda: _attempt_with_retry(run, _keys("i", 50), lambda rid: table.ingest(
                _records(_keys("i", 50)), request_id=rid)),
            "write": lambda: _attempt_with_retry(run, _keys("w", BIG_WRITE), lambda rid: table.write(
                _records(_keys("w", BIG_WRITE), PAYLOAD), request_id=rid)),
            "flush": table.flush,
            "compaction": lambda: table.compact("local"),
            "split": table.split,
            "gc": lambda: table.gc(now_ms=now + DAYS_AHEAD_MS),
            "batcher": lambda: run_ingest_batcher(s, name, now_ms=now + DAYS_AHEAD_MS),
            "snapshot": lambda: (s.state_store.snapshot(table.info.table_id),
                                 s.state_store.expire(table.info.table_id, now_ms=now + DAYS_AHEAD_MS)),
        }
        try:
            steps[path]()
        except Exception:
            run.failed.append(set())  # maintenance moves no acknowledged record; the checks run it again
        fired = stack.disarm()
        if path == "batcher":  # the batcher runs again (a job it could not finish is requeued)
            run_ingest_batcher(s, name, now_ms=now + 2 * DAYS_AHEAD_MS)
            run.acked.update(_keys("b0", 25) + _keys("b1", 25))
    return run, fired


def _setup_keys(path: str) -> list[str]:
    return {"flush": _keys("w", 60), "compaction": _keys("c0", 30) + _keys("c1", 30), "split": _keys("s", 120),
            "gc": _keys("g0", 30) + _keys("g1", 30), "snapshot": _keys("n", 40)}[path]


def check(stack: Stack, run: Run, cell: Cell) -> None:
    """The end of every case, through a fresh store (see the module docstring)."""
    from sleeper_ops.io.datafile import sketch_key

    with stack.open_fresh() as s:
        try:
            table = s.table(run.table)
            state = table.state()
            table.flush()
            got = table.query(ranges=[("", None)]).column("key").to_pylist()
            table.gc(now_ms=int(time.time() * 1000) + DAYS_AHEAD_MS)
            state = table.state()
        except Exception as e:  # the table cannot be read, flushed or collected: wedged
            cell.wedged += 1
            pytest.fail(f"table {run.table} wedged: {type(e).__name__}: {e}")
        counts: dict[str, int] = {}
        for k in got:
            counts[k] = counts.get(k, 0) + 1
        cell.doubled += sum(c - 1 for c in counts.values() if c > 1)
        cell.lost += len(run.acked - counts.keys())
        for keys in run.failed:
            there = len(keys & counts.keys())
            if there not in (0, len(keys)):
                cell.lost += len(keys) - there
        stray = set(counts) - run.acked - set().union(*run.failed)
        cell.doubled += len(stray)
        referenced = set(state.files)
        allowed = referenced | {sketch_key(f) for f in referenced}
        objects = [o.key for o in s.objects.list(table.info.table_id)]
        cell.orphans += len([k for k in objects if k not in allowed])


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("path", PATHS)
def test_a_fault_on_each_write_path_loses_doubles_and_wedges_nothing(path, fault, stack, matrix, tmp_path):
    if path == "snapshot" and stack.backend == "postgres":
        pytest.skip("PostgreSQL keeps no snapshots")
    if fault == "cut" and stack.backend == "dynamodb":
        pytest.skip("DynamoDB has no connection to cut before a commit (a request lost on its way is 'throttle')")
    if stack.backend == "postgres" and fault not in ("lost", "cut") and path not in OBJECT_WRITERS:
        pytest.skip(f"{path} writes only to PostgreSQL, which neither throttles nor answers 5xx")
    cell = matrix.cells.setdefault((path, stack.backend, fault), Cell())
    run, fired = run_path(path, fault, stack, tmp_path)
    cell.runs += 1
    cell.state_faults += fired["state"]
    cell.applied += fired["applied"]
    cell.s3_faults += fired["s3"]
    cell.failed += len(run.failed)
    cell.retried += run.retried
    check(stack, run, cell)
    assert (cell.lost, cell.doubled, cell.wedged, cell.orphans) == (0, 0, 0, 0), matrix.table()
    where = f"{path} ({stack.backend}, {fault})"
    if stack.backend == "dynamodb" or fault in ("lost", "cut"):
        assert fired["state"] > 0, f"the state store's fault did not fire on {where}"
    if stack.backend == "postgres" and fault in ("lost", "cut"):
        assert fired["applied"] == (1 if fault == "lost" else 0), \
            f"the server had {'not ' if fault == 'lost' else ''}committed when the connection was cut on {where}"
    if fault != "cut" and path in OBJECT_WRITERS | ({"write", "snapshot"} if stack.backend == "dynamodb" else set()):
        assert fired["s3"] > 0, f"the object store's fault did not fire on {where}"
