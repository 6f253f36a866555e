"""The compaction DAG run with dag.test() on S3 + DynamoDB with no PostgreSQL:
``[state_store] backend = "dynamodb"`` and an ``s3://`` object store, both on one moto
server on 127.0.0.1 (the one of :mod:`tests.integration.test_dynamodb_cli`), Airflow in a
subprocess as in :mod:`tests.integration.test_dags`."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.maintenance.leases import lease_name
from tests.integration import test_dags as dag_tests
from tests.integration import test_dynamodb_cli as cli_tests

pytestmark = pytest.mark.integration

# the fixtures, shared: a moto server (DynamoDB and S3) with the data bucket; a migrated AIRFLOW_HOME per test
moto = cli_tests.moto


@pytest.fixture
def sleeper_home(moto: str, tmp_path: Path) -> Path:
    """A SLEEPER_HOME whose data and DynamoDB tables are this test's own."""
    home = tmp_path / "sleeper"
    home.mkdir()
    run = uuid.uuid4().hex[:8]
    (home / "sleeper.toml").write_text(cli_tests.sleeper_toml(moto, f"dags-{run}", f"dags-{run}-"))
    return home


@pytest.fixture
def sleeper(sleeper_home: Path) -> Iterator[Sleeper]:
    with Sleeper(sleeper_home) as s:
        yield s


def _records(table: pa.Table) -> Counter[tuple[str, int, str]]:
    """The multiset of (key, ts, value) records in ``table``."""
    return Counter(zip(table.column("key").to_pylist(), table.column("ts").to_pylist(),
                       table.column("value").to_pylist()))


def test_compaction_dag_on_s3_and_dynamodb_leaves_one_file_per_leaf(sleeper: Sleeper, sleeper_home: Path,
                                                                   airflow_home: Path, moto: str) -> None:
    import boto3

    assert type(sleeper.state_store).__module__.startswith("statestore.dynamodb")
    table = dag_tests._filled_table(sleeper, "events")  # 3 ingests of 1,000 records over 2 leaves
    ingested = _records(pa.concat_tables([dag_tests._rows(1000, seed) for seed in range(3)]))
    assert sum(ingested.values()) == len(ingested) == 3000
    assert dag_tests._references_per_leaf(table) and set(dag_tests._references_per_leaf(table).values()) == {3}

    runs = dag_tests.run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction"},
                              AWS_EC2_METADATA_DISABLED="true")
    assert runs.results[0]["state"] == "success", runs.logs[0][-4000:]
    assert runs.results[0]["tasks"] == {"create_jobs": "success", "run_local": "success", "run_spark": "skipped",
                                        "report": "success"}

    # This process's store catches up with the commits the DAG made in DynamoDB.
    per_leaf = dag_tests._references_per_leaf(table)
    assert len(per_leaf) == 2 and set(per_leaf.values()) == {1}, per_leaf
    state = table.state()
    outputs = {r.filename for r in state.references.values()}
    assert len(outputs) == 2 and sum(r.record_count for r in state.references.values()) == 3000
    assert _records(table.query(ranges=[("", None)])) == ingested  # every record, each exactly once

    jobs = table.jobs(kind="compaction")
    assert len(jobs) == 2 and {j.status for j in jobs} == {"committed"}
    assert all(j.run_id.startswith("sleeper_events_compaction/manual__") for j in jobs)
    assert sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction")) is None

    # The compacted files are objects in the S3 bucket.
    s3 = boto3.client("s3", endpoint_url=f"http://{moto}", aws_access_key_id="test", aws_secret_access_key="test",
                      region_name="us-east-1")
    bucket, _, prefix = sleeper.objects.root.partition("/")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]}
    assert {f"{prefix}/{name}" for name in outputs} <= keys, (outputs, keys)
