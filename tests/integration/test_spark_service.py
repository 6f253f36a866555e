"""The standing Spark service (issue 20): bulk imports and compaction batches sent to one
long-lived driver on a standalone cluster (a master, 2 one-core workers, the service;
one cluster for the module), against the embedded PostgreSQL. Records carry a unique
``id``: "exactly once" compares multisets of ids."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tomli_w

from sleeper_ops import Sleeper
from sleeper_ops.config import SleeperConfig
from sleeper_ops.spark.bulk_submit import BulkImportError
from sleeper_ops.spark.cluster import standing_cluster
from tests.integration import test_dags as dag_tests
from tests.integration.test_spark_compaction import BASIC, SCHEMA, ids, rows

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    with standing_cluster(tmp_path_factory.mktemp("spark"), workers=2, cores=1, memory="1g") as cluster:
        yield cluster


def _health(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/health", timeout=10) as r:
        return json.loads(r.read())


def _open(home, pg_dsn: str, cluster) -> Sleeper:
    raw = {"object_store": {"uri": "data"}, "state_store": {"backend": "postgres", "dsn": pg_dsn},
           "spark": {"master": cluster.master, "service": cluster.service}}
    return Sleeper(config=SleeperConfig.from_dict(home, raw))


def test_a_bulk_import_and_a_compaction_run_on_the_standing_service_once_each(tmp_path, pg_dsn, service):
    src = tmp_path / "raw"
    src.mkdir()
    parts = [rows(4000, seed=i, first_id=i * 1_000_000) for i in range(3)]
    for i, t in enumerate(parts):
        pq.write_table(t, src / f"part-{i}.parquet")
    before = _health(service.service)
    with _open(tmp_path / "home", pg_dsn, service) as s:
        t = s.create_table("events", SCHEMA, split_points=[2500, 5000, 7500],
                           properties={**BASIC, "sleeper.table.bulk.import.min.leaf.partitions": "4",
                                       "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
        result = t.bulk_import([str(src)], import_key="day-1", run_id="r1")
        assert result.status == "committed" and result.records == 12_000, result
        assert ids(t) == Counter(pa.concat_tables(parts).column("id").to_pylist())
        assert len(t.state().references) == 4, "one file per leaf"

        t.ingest(rows(2000, seed=9, first_id=9_000_000))
        report = t.compact(runner="spark", run_id="c1")
        assert {r.status for r in report.results} == {"committed"} and len(report.results) == 4, report.summary()
        assert report.rows_written == 14_000
        state = t.state()
        assert len(state.references) == 4
        for r in state.references.values():
            f = pq.read_table(s.objects.path(r.filename))
            keys = list(zip(f.column("key").to_pylist(), f.column("ts").to_pylist()))
            assert keys == sorted(keys) and f.num_rows == r.record_count
        assert sum(ids(t).values()) == 14_000 and len(ids(t)) == 14_000
        assert {j.status for j in t.jobs(kind="compaction")} == {"committed"}

        again = t.bulk_import([str(src)], import_key="day-1")
        assert again.status == "already imported" and sum(ids(t).values()) == 14_000
    after = _health(service.service)
    assert after["application_id"] == before["application_id"], "the jobs ran in the one standing application"
    assert after["jobs"].get("succeeded", 0) - before["jobs"].get("succeeded", 0) == 2


def test_an_export_runs_on_the_standing_service_as_a_job_of_its_own_and_writes_once(tmp_path, pg_dsn, service):
    """Issue 37: an export sent to the service (what a durable ``runner="spark"`` export
    task submits) runs one Spark task a leaf in the standing application; its status, read
    by another client, carries the result; the same export key sent again answers "already
    exported" and writes nothing."""
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.query.export import rows_of
    from sleeper_ops.spark.service_client import export_outcome, export_request, job_status, submit_job, wait_for_job

    with _open(tmp_path / "home", pg_dsn, service) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000])
        data = rows(3000, seed=3, first_id=0)
        t.ingest(data)
        assert s.config is not None
        dest = str(tmp_path / "out")
        request = export_request(s.config, t.info, dest, export_key="x1", run_id="r1")
        job_id, instance = submit_job(service.service, request)
        wait_for_job(service.service, job_id, instance)
        result = export_outcome(t.info, "x1", job_status(service.service, job_id, instance))
        assert result.written and result.manifest.rows == 3000 and len(result.manifest.files) == 2
        exported = rows_of(ObjectStore(dest), result.manifest)
        assert Counter(exported.column("id").to_pylist()) == Counter(data.column("id").to_pylist())
        job_id, instance = submit_job(service.service, request)
        again = export_outcome(t.info, "x1", wait_for_job(service.service, job_id, instance))
        assert not again.written and again.manifest == result.manifest


def test_a_failing_bulk_import_on_the_service_says_why_and_commits_nothing(tmp_path, pg_dsn, service):
    src = tmp_path / "raw"
    src.mkdir()
    pq.write_table(rows(1000, seed=1, first_id=0), src / "good.parquet")
    pq.write_table(pa.table({"key": ["not-a-number"] * 10, "ts": [1] * 10, "id": list(range(10)),
                             "name": ["x"] * 10}), src / "bad.parquet")
    with _open(tmp_path / "home", pg_dsn, service) as s:
        t = s.create_table("events", SCHEMA, split_points=[5000],
                           properties={"sleeper.table.bulk.import.min.leaf.partitions": "1"})  # no pre-split
        with pytest.raises(BulkImportError) as failed:
            t.bulk_import([str(src)], import_key="bad-day")
        reason = str(failed.value)
        assert "bad-day" in reason and "bad.parquet: column 'key' holds string" in reason, reason
        assert "IngestError" in reason and "Traceback" not in reason, "the executor's error, in a line"
        assert t.state().references == {} and sum(ids(t).values()) == 0
        (job,) = t.jobs(kind="bulk_import")
        assert job.status == "failed" and "bad.parquet" in job.reason
        leftovers = [o.key for o in s.objects.list(t.info.table_id)]
        assert leftovers == [], "the failed import's outputs and runs are deleted"


# the Airflow fixtures of the DAG tests: a migrated AIRFLOW_HOME of this test's own


def test_the_compaction_dag_sends_its_spark_jobs_to_the_service_the_connection_names(tmp_path, pg_dsn, service,
                                                                                     airflow_home):
    home = tmp_path / "sleeper"
    home.mkdir()
    (home / "sleeper.toml").write_text(tomli_w.dumps({
        "object_store": {"uri": "data"}, "state_store": {"backend": "postgres", "dsn": pg_dsn},
        "spark": {"master": service.master, "service": service.service}}))
    before = _health(service.service)["jobs"].get("succeeded", 0)
    with Sleeper(home) as s:
        table = dag_tests._filled_table(s, "events")
        runs = dag_tests.run_dags(airflow_home, home, {"dag_id": "sleeper_events_compaction",
                                                       "conf": {"runner": "spark"}})
        assert runs.results[0]["state"] == "success", runs.logs[0][-3000:]
        assert runs.results[0]["tasks"]["run_spark"] == "success"
        assert set(dag_tests._references_per_leaf(table).values()) == {1}
        assert table.query(ranges=[("", None)]).num_rows == 3000
    assert _health(service.service)["jobs"].get("succeeded", 0) == before + 1, "one batch, on the service"
