"""Bulk import on EMR Serverless (``sleeper.table.bulk.import.platform = emr_serverless``)
against moto's EMR Serverless, S3 and DynamoDB on one server in this process.

moto records the job request and says ``SUCCESS`` at once; it runs nothing. So the test
plays EMR: it reads the job moto was asked to start and runs the job's entry point
(:func:`sleeper_ops.spark.bulk_driver.main`, what ``bulk_import.py`` in the package calls)
with the job's own arguments, on a local SparkSession with nothing but the package's
configuration and the AWS credential chain (as the execution role gives). The deferral
is completed by the provider's own trigger, rebuilt from its serialized form as the
triggerer rebuilds it and run on an event loop (its waiter polled through aiobotocore),
its event handed to ``execute_complete``. Records carry a unique ``id``: exact counts compare multisets.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import traceback
import zipfile
from datetime import UTC, datetime
from typing import Any, Iterator

import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.bulk_import.job import import_job_id
from statestore.errors import PropertyError
from tests.integration.statestore.conftest import serial_moto_server
from tests.integration.test_dynamodb_cli import sleeper_toml
from tests.integration.test_spark_compaction import SCHEMA, ids, rows

pytestmark = pytest.mark.integration

BUCKET = "sleeper-emr-data"
ROLE = "arn:aws:iam::123456789012:role/sleeper-emr-bulk-import"  # moto's account
PACKAGE = f"s3://{BUCKET}/emr-package"
AWS_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}


@pytest.fixture(scope="module")
def aws() -> Iterator[dict[str, Any]]:
    """A moto server (S3, DynamoDB, EMR Serverless) with the bucket and a started Spark
    application; the process's AWS credential chain and ``aws_default`` point at it."""
    import boto3

    with serial_moto_server() as url:
        env = {**AWS_ENV, "AWS_ENDPOINT_URL": url,
               "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "extra": {
                   "region_name": "us-east-1", "endpoint_url": url, "aws_access_key_id": "test",
                   "aws_secret_access_key": "test"}})}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            s3 = boto3.client("s3", endpoint_url=url)
            s3.create_bucket(Bucket=BUCKET)
            emr = boto3.client("emr-serverless", endpoint_url=url)
            app = emr.create_application(name="sleeper", releaseLabel="emr-7.9.0", type="SPARK")["applicationId"]
            emr.start_application(applicationId=app)
            yield {"url": url, "s3": s3, "emr": emr, "app": app}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="module")
def emr_spark(aws: dict[str, Any], spark: Any) -> Iterator[Any]:
    """The local stand-in for EMR's Spark (the worker's shared session): its Python
    workers get the same credential chain while this module runs."""
    env = spark.sparkContext.environment
    saved = dict(env)
    env.update({k: os.environ[k] for k in (*AWS_ENV, "AWS_ENDPOINT_URL")})
    try:
        yield spark
    finally:
        env.clear()
        env.update(saved)


@pytest.fixture(scope="module")
def sleeper(aws: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sleeper]:
    """A Sleeper on S3 + DynamoDB, and the EMR package put where the tables name it."""
    from sleeper_ops.spark.emr_serverless import build_package

    home = tmp_path_factory.mktemp("sleeper-emr-home")
    (home / "sleeper.toml").write_text(sleeper_toml(aws["url"][len("http://"):], "tables", "emr-") .replace(
        "sleeper-cli-data", BUCKET))
    env_archive = home / "environment.tar.gz"
    env_archive.write_bytes(b"a venv-pack archive built on Amazon Linux")
    with Sleeper(home=home) as s:
        written = build_package(PACKAGE, s.config, environment=str(env_archive))
        assert [w.rsplit("/", 1)[1] for w in written] == ["bulk_import.py", "sleeper.zip", "sleeper.toml",
                                                         "environment.tar.gz"]
        yield s


def _emr_table(sleeper: Sleeper, name: str, app: str, min_leaves: int = 2) -> Any:
    return sleeper.create_table(name, SCHEMA, properties={
        "sleeper.table.bulk.import.source": f"s3://{BUCKET}/raw/{name}/{{{{ data_interval_start | ds }}}}/",
        "sleeper.table.bulk.import.min.leaf.partitions": str(min_leaves),
        "sleeper.table.bulk.import.min.rows.per.leaf": "1",
        "sleeper.table.bulk.import.platform": "emr_serverless",
        "sleeper.table.bulk.import.emr.serverless.application.id": app,
        "sleeper.table.bulk.import.emr.serverless.execution.role.arn": ROLE,
        "sleeper.table.bulk.import.emr.serverless.package": PACKAGE})


def _upload(aws: dict[str, Any], table: str, day: str, n_files: int = 3, n: int = 2000) -> int:
    for i in range(n_files):
        buf = io.BytesIO()
        pq.write_table(rows(n, seed=i, first_id=i * 1_000_000), buf)
        aws["s3"].put_object(Bucket=BUCKET, Key=f"raw/{table}/{day}/part-{i}.parquet", Body=buf.getvalue())
    return n_files * n


def _task_and_context(sleeper: Sleeper, table: str, day: datetime) -> tuple[Any, dict[str, Any]]:
    """The dated DAG's ``bulk_import`` task, templates rendered for the run of ``day``."""
    from sleeper_ops.orchestration.dag_factory import build_dag

    dag = build_dag(sleeper.table(table).info, "bulk_import")
    task = dag.get_task("bulk_import")
    run_id = f"scheduled__{day.isoformat()}"
    context: dict[str, Any] = {"dag": dag, "task": task, "run_id": run_id, "data_interval_start": day,
                               "logical_date": day, "ds": day.date().isoformat(), "params": {}}
    task.render_template_fields(context)
    return task, context


def _start(task: Any, context: dict[str, Any]) -> Any:
    """``execute`` up to its deferral: the job started; returns the trigger."""
    from airflow.providers.amazon.aws.triggers.emr import EmrServerlessStartJobTrigger
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, EmrServerlessStartJobTrigger) and deferred.value.method_name == "execute_complete"
    return trigger


def _complete(task: Any, context: dict[str, Any], trigger: Any) -> Any:
    """What the triggerer does with ``trigger``, then ``execute_complete``: the trigger is
    rebuilt from its serialized form, its async ``run()`` polls the job through
    aiobotocore (polling every second instead of the task's 30) and its first event is
    handed to ``execute_complete``. Returns the job id, or raises as the task would."""
    import asyncio
    import importlib

    classpath, kwargs = trigger.serialize()
    module, name = classpath.rsplit(".", 1)
    rebuilt = getattr(importlib.import_module(module), name)(**{**kwargs, "waiter_delay": 1,
                                                                "waiter_max_attempts": 10})

    async def first_event() -> Any:
        async for event in rebuilt.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return task.execute_complete(context, asyncio.run(first_event()))


def _play_emr(aws: dict[str, Any], job_id: str, spark: Any, *, fail_if_nonzero: bool = True) -> int:
    """Run the job moto was asked to start, as EMR would: the package's entry point with
    the job's arguments; a non-zero exit or an exception marks the job FAILED."""
    from moto.emrserverless.models import emrserverless_backends

    from sleeper_ops.spark.bulk_driver import main

    run = aws["emr"].get_job_run(applicationId=aws["app"], jobRunId=job_id)["jobRun"]
    args = run["jobDriver"]["sparkSubmit"]["entryPointArguments"]
    try:
        code = main(args, spark=spark)
    except Exception:  # the driver crashed: EMR says FAILED
        traceback.print_exc()
        code = 1
    if code != 0 and fail_if_nonzero:
        (job,) = [j for j in emrserverless_backends["123456789012"]["us-east-1"].job_runs[aws["app"]]
                  if j.id == job_id]
        job.state, job.state_details = "FAILED", f"the driver exited with {code}"
    return code


def test_the_emr_package_holds_the_entry_point_a_self_contained_library_and_no_secret(sleeper, aws, tmp_path):
    get = lambda key: aws["s3"].get_object(Bucket=BUCKET, Key=f"emr-package/{key}")["Body"].read()  # noqa: E731
    from sleeper_ops.spark.submit import spark_app_path

    assert get("bulk_import.py") == spark_app_path("bulk_import.py").read_bytes()
    config = get("sleeper.toml").decode()
    assert "secret_key" not in config and "access_key" not in config and 'backend = "dynamodb"' in config
    (tmp_path / "sleeper.zip").write_bytes(get("sleeper.zip"))
    names = zipfile.ZipFile(tmp_path / "sleeper.zip").namelist()
    assert "sleeper_ops/spark/bulk_driver.py" in names and "statestore/postgres/ddl/001_initial.sql" in names
    assert not [n for n in names if "__pycache__" in n]
    # the driver imports from the zip alone (-I: no checkout, no site-packages of ours)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import sleeper_ops.spark.bulk_driver as d, "
             "statestore.dynamodb; print(d.__file__)")
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path / "sleeper.zip")], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().startswith(str(tmp_path / "sleeper.zip"))


def test_platform_emr_serverless_is_refused_without_its_application_role_and_package(sleeper):
    with pytest.raises(PropertyError, match="emr.serverless.application.id and .*execution.role.arn"):
        sleeper.create_table("half_set", SCHEMA, properties={"sleeper.table.bulk.import.platform": "emr_serverless",
                                                             "sleeper.table.bulk.import.emr.serverless.package":
                                                                 PACKAGE})
    with pytest.raises(PropertyError, match="expected one of spark, emr_serverless"):
        sleeper.create_table("bad_platform", SCHEMA, properties={"sleeper.table.bulk.import.platform": "emr"})


def test_the_dated_dag_starts_the_emr_job_with_the_entry_point_arguments_and_import_key(sleeper, aws):
    t = _emr_table(sleeper, "requested", aws["app"])
    day = datetime(2026, 1, 2, tzinfo=UTC)
    task, context = _task_and_context(sleeper, "requested", day)
    from airflow.providers.amazon.aws.operators.emr import EmrServerlessStartJobOperator

    assert isinstance(task, EmrServerlessStartJobOperator) and task.deferrable
    trigger = _start(task, context)
    run = aws["emr"].get_job_run(applicationId=aws["app"], jobRunId=trigger.return_value["job_id"])["jobRun"]
    request = {k: run[k] for k in ("name", "executionRole", "jobDriver")}
    print("EMR Serverless StartJobRun request (as moto recorded it):\n" + json.dumps(request, indent=2))
    key = f"{t.info.table_id}/2026-01-02T00:00:00+00:00"
    assert request == {
        "name": "sleeper-bulk-import-requested",
        "executionRole": ROLE,
        "jobDriver": {"sparkSubmit": {
            "entryPoint": f"{PACKAGE}/bulk_import.py",
            "entryPointArguments": ["--config-file", f"{PACKAGE}/sleeper.toml", "--table", "requested",
                                    "--sources", f"s3://{BUCKET}/raw/requested/2026-01-02/", "--import-key", key,
                                    "--run-id", "sleeper_requested_bulk_import/scheduled__2026-01-02T00:00:00+00:00"],
            "sparkSubmitParameters": " ".join([
                f"--conf spark.submit.pyFiles={PACKAGE}/sleeper.zip",
                f"--conf spark.archives={PACKAGE}/environment.tar.gz#environment",
                "--conf spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON=./environment/bin/python",
                "--conf spark.emr-serverless.driverEnv.PYSPARK_PYTHON=./environment/bin/python",
                "--conf spark.executorEnv.PYSPARK_PYTHON=./environment/bin/python"])}},
    }
    assert import_job_id(t.info, key).startswith("bulk-")  # the job the driver will record
    assert trigger.return_value["application_id"] == aws["app"]


def test_an_emr_job_that_succeeds_commits_once_and_a_retried_job_of_the_date_adds_nothing(sleeper, aws, emr_spark):
    t = _emr_table(sleeper, "succeeds", aws["app"])
    expected = _upload(aws, "succeeds", "2026-01-02")
    day = datetime(2026, 1, 2, tzinfo=UTC)

    task, context = _task_and_context(sleeper, "succeeds", day)
    trigger = _start(task, context)
    assert _play_emr(aws, trigger.return_value["job_id"], emr_spark) == 0
    assert _complete(task, context, trigger) == trigger.return_value["job_id"]
    assert sum(ids(t).values()) == expected and set(ids(t).values()) == {1}
    (job,) = t.jobs(kind="bulk_import")
    assert job.status == "committed" and job.rows_written == expected

    # Airflow retries the task (or the date is reprocessed): a new EMR job, same import key
    task, context = _task_and_context(sleeper, "succeeds", day)
    again = _start(task, context)
    assert again.return_value["job_id"] != trigger.return_value["job_id"]
    assert _play_emr(aws, again.return_value["job_id"], emr_spark) == 0  # "already imported": exit 0
    _complete(task, context, again)
    assert sum(ids(t).values()) == expected and set(ids(t).values()) == {1}
    assert [j.status for j in t.jobs(kind="bulk_import")] == ["committed"]
    assert len(t.state().references) == len({r.filename for r in t.state().references.values()}) <= 2


def test_an_emr_job_that_fails_mid_import_commits_nothing_and_leaves_no_file(sleeper, aws, emr_spark):
    from airflow.exceptions import AirflowException

    t = _emr_table(sleeper, "fails", aws["app"], min_leaves=1)  # no pre-split: the failure is in the Spark job
    _upload(aws, "fails", "2026-01-03", n_files=2)
    # a third input that is not Parquet past its footer check: the Spark tasks reading it fail
    aws["s3"].put_object(Bucket=BUCKET, Key="raw/fails/2026-01-03/part-9.parquet", Body=b"PAR1" + b"\0" * 64 + b"PAR1")
    day = datetime(2026, 1, 3, tzinfo=UTC)
    task, context = _task_and_context(sleeper, "fails", day)
    trigger = _start(task, context)
    assert _play_emr(aws, trigger.return_value["job_id"], emr_spark) != 0
    # the job's own reason, from the trigger's event (the provider's operator alone raised KeyError)
    with pytest.raises(AirflowException, match="EMR Serverless job of application .* failed: .*the driver exited "
                                               "with 1"):
        _complete(task, context, trigger)
    assert sum(ids(t).values()) == 0
    state = t.state()
    assert state.references == {} and state.files == {}
    left = aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix=f"tables/{t.info.table_id}/").get("KeyCount", 0)
    assert left == 0, "no output of the failed job is left behind"
    assert [j.status for j in t.jobs(kind="bulk_import")] == ["failed"]
