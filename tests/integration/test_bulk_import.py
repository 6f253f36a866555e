"""Bulk import on Spark (``local[2]`` through spark-submit) against the embedded
PostgreSQL: one commit, one sorted file per leaf, pre-splitting, idempotent by import
key. Records carry a unique ``id``: "exactly once" compares multisets of ids."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomli_w

from sleeper_ops.bulk_import.job import import_job_id
from tests.integration import test_spark_compaction as spark_tests
from tests.integration.test_spark_compaction import ARROW, BUCKET, SCHEMA, ids, open_sleeper, rows

moto_endpoint = spark_tests.moto_endpoint  # the fixture: a moto S3 server on 127.0.0.1 with the bucket

pytestmark = pytest.mark.integration


def _inputs(d, n_files: int = 3, n: int = 4000) -> pa.Table:
    d.mkdir(parents=True, exist_ok=True)
    parts = [rows(n, seed=i, first_id=i * 1_000_000) for i in range(n_files)]
    for i, t in enumerate(parts):
        pq.write_table(t, d / f"part-{i}.parquet")
    return pa.concat_tables(parts)


def test_bulk_import_commits_once_sorted_per_leaf_and_a_repeat_of_the_key_adds_nothing(tmp_path, pg_dsn):
    data = _inputs(tmp_path / "raw" / "2026-01-02")
    with open_sleeper(tmp_path / "home", pg_dsn) as s:
        t = s.create_table("events", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "4",
                                                         "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
        result = t.bulk_import([str(tmp_path / "raw" / "2026-01-02")], import_key="day-2026-01-02", run_id="r1")
        assert result.status == "committed", result
        assert result.records == 12_000 and result.files_read == 3 and result.presplits == 3
        state = t.state()
        leaves = [p for p in state.partitions.values() if p.is_leaf]
        assert len(leaves) == 4, "pre-split from the sample to the minimum leaf count"
        assert {r.partition_id for r in state.references.values()} <= {p.id for p in leaves}
        assert len(state.references) == len(result.files_written) <= 4
        for r in state.references.values():  # one sorted file per leaf, with its sketches
            f = pq.read_table(s.objects.path(r.filename))
            keys = list(zip(f.column("key").to_pylist(), f.column("ts").to_pylist()))
            assert keys == sorted(keys) and f.num_rows == r.record_count
            assert s.objects.head(r.filename.replace(".parquet", ".sketches")) is not None
        assert ids(t) == Counter(data.column("id").to_pylist())
        (job,) = t.jobs(kind="bulk_import")
        assert job.job_id == import_job_id(t.info, "day-2026-01-02")
        assert (job.status, job.rows_written, job.run_id) == ("committed", 12_000, "r1")

        again = t.bulk_import([str(tmp_path / "raw" / "2026-01-02")], import_key="day-2026-01-02")
        assert again.status == "already imported" and again.records == 0
        assert ids(t) == Counter(data.column("id").to_pylist())  # 12,000 records, each once
        assert sum(ids(t).values()) == 12_000


def test_bulk_import_of_a_missing_source_imports_nothing_and_names_it(tmp_path, pg_dsn):
    from sleeper_ops.errors import IngestError

    with open_sleeper(tmp_path / "home", pg_dsn) as s:
        t = s.create_table("events", SCHEMA)
        with pytest.raises(IngestError, match="no input files"):
            t.bulk_import([str(tmp_path / "nothing-here")])
        assert t.state().files == {} and ARROW is not None


def test_a_bulk_import_killed_mid_write_imports_once_on_retry_and_leaves_no_partial_files(tmp_path, pg_dsn):
    """Issue 10: spark-submit SIGKILLed while its tasks write; the retry of the same import
    key imports every record once, and removes what the killed attempt left."""
    import os
    import signal
    import threading
    import time

    import psutil

    from sleeper_ops.maintenance.gc import sweep_orphans
    from sleeper_ops.spark.bulk_submit import BulkImportError

    src = tmp_path / "raw"
    data = _inputs(src, n_files=8, n=75_000)
    with open_sleeper(tmp_path / "home", pg_dsn) as s:
        t = s.create_table("events", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "4",
                                                         "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
        errors: list[BaseException] = []

        def doomed() -> None:
            try:
                t.bulk_import([str(src)], import_key="k")
            except BaseException as e:
                errors.append(e)

        worker = threading.Thread(target=doomed)
        worker.start()
        deadline = time.monotonic() + 120
        while not any(True for _ in s.objects.list(f"{t.info.table_id}/bulk-import-runs")):
            assert time.monotonic() < deadline and worker.is_alive(), "the import never started writing"
            time.sleep(0.05)
        killed = 0
        for child in psutil.Process().children(recursive=True):  # spark-submit leads its own process group
            try:
                if any("bulk_import.py" in part for part in child.cmdline()) and child.pid == os.getpgid(child.pid):
                    os.killpg(child.pid, signal.SIGKILL)
                    killed += 1
            except (psutil.Error, ProcessLookupError):
                continue  # a process that ended meanwhile (or a zombie) is not the one
        assert killed == 1, "spark-submit was found and killed"
        worker.join(120)
        assert errors and isinstance(errors[0], BulkImportError), errors
        assert t.state().files == {}, "nothing was committed"
        (killed,) = t.jobs(kind="bulk_import")
        assert killed.status in ("started", "failed") and killed.outputs

        again = t.bulk_import([str(src)], import_key="k")
        assert again.status == "committed" and again.records == 600_000
        assert ids(t) == Counter(data.column("id").to_pylist())  # 600,000 records, each once
        assert not list(s.objects.list(f"{t.info.table_id}/bulk-import-runs")), "the killed attempt's runs are gone"
        # what the killed attempt wrote is no longer named by any job in flight: the sweep takes it
        tracked = set(t.state().files)
        swept = sweep_orphans(s.state_store, s.objects, t.info, grace_minutes=0)
        assert not {k.replace(".sketches", ".parquet") for k in swept} & tracked
        left = {o.key.replace(".sketches", ".parquet") for o in s.objects.list(f"{t.info.table_id}/data")}
        assert left == tracked, f"partial files left: {sorted(left - tracked)}"
        assert ids(t) == Counter(data.column("id").to_pylist())


def test_bulk_import_from_s3_parquet_into_a_table_on_s3(tmp_path, pg_dsn, moto_endpoint):
    """Sources as an ``s3://`` prefix and a glob, read by the executors through pyarrow
    with the configuration's endpoint and credentials (no Hadoop jars); the files land
    on S3 too."""
    import io

    endpoint, client = moto_endpoint
    parts = [rows(3000, seed=i, first_id=i * 1_000_000) for i in range(4)]
    for i, part in enumerate(parts):
        buf = io.BytesIO()
        pq.write_table(part, buf)
        client.put_object(Bucket=BUCKET, Key=f"raw/2026-01-0{1 + i // 2}/part-{i}.parquet", Body=buf.getvalue())
    store = {"uri": f"s3://{BUCKET}/tables", "endpoint_override": endpoint, "scheme": "http",
             "region": "us-east-1", "access_key": "test", "secret_key": "test"}
    with open_sleeper(tmp_path / "home", pg_dsn, store, toml=False) as s:
        t = s.create_table("events", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "2",
                                                         "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
        r = t.bulk_import([f"s3://{BUCKET}/raw/2026-01-01/", f"s3://{BUCKET}/raw/2026-01-02/*.parquet"],
                          import_key="two-days")
        assert r.status == "committed" and r.files_read == 4 and r.records == 12_000, r
        keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="tables/").get("Contents", [])}
        assert all(f"tables/{f}" in keys for f in t.state().files), "outputs are on S3"
        assert not [k for k in keys if "/bulk-import-runs/" in k], "no runs left behind"
        assert ids(t) == Counter(pa.concat_tables(parts).column("id").to_pylist())


@pytest.fixture
def spark_cluster(tmp_path):
    from tests.spark_cluster import standalone_cluster

    yield from standalone_cluster(tmp_path / "spark")


def test_bulk_import_on_a_spark_standalone_cluster(tmp_path, pg_dsn, spark_cluster):
    """A real distributed engine: a standalone master and worker on 127.0.0.1, the job
    submitted to ``spark://127.0.0.1:PORT``; every record once."""
    data = _inputs(tmp_path / "raw", n_files=4, n=5000)
    from sleeper_ops import Sleeper

    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(tomli_w.dumps({
        "object_store": {"uri": "data"}, "state_store": {"backend": "postgres", "dsn": pg_dsn},
        "spark": {"master": spark_cluster}}))
    with Sleeper(home=home) as s:
        assert s.config is not None and s.config.spark_master == spark_cluster
        t = s.create_table("events", SCHEMA, properties={"sleeper.table.bulk.import.min.leaf.partitions": "4",
                                                         "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
        r = t.bulk_import([str(tmp_path / "raw")], import_key="cluster")
        assert r.status == "committed" and r.records == 20_000, r
        assert ids(t) == Counter(data.column("id").to_pylist())


def test_the_ingest_batcher_sends_big_jobs_to_bulk_import_and_marks_their_requests_in_its_commit(tmp_path, pg_dsn):
    from sleeper_ops.ingest.batcher import run_ingest_batcher, submit_ingest_requests

    data = _inputs(tmp_path / "raw", n_files=3, n=2000)
    with open_sleeper(tmp_path / "home", pg_dsn) as s:
        t = s.create_table("events", SCHEMA, properties={
            "sleeper.table.bulk.import.min.leaf.partitions": "2", "sleeper.table.bulk.import.min.rows.per.leaf": "1",
            "sleeper.table.ingest.batcher.job.min.size": "1",
            "sleeper.table.ingest.batcher.bulk.import.min.size": "1"})  # every job is "big"
        submit_ingest_requests(s, "events", [str(p) for p in sorted((tmp_path / "raw").iterdir())])
        report = run_ingest_batcher(s, "events")
        assert [j.status for j in report.jobs] == ["committed"] and report.records == 6000, report.summary()
        assert {r.status for r in s.state_store.list_ingest_requests(t.info.table_id)} == {"ingested"}
        (bulk,) = t.jobs(kind="bulk_import")
        assert bulk.status == "committed" and bulk.job_id == import_job_id(t.info, report.jobs[0].job_id)
        assert ids(t) == Counter(data.column("id").to_pylist())  # 6,000 records, once
        assert run_ingest_batcher(s, "events").jobs == []  # nothing left to ingest again
