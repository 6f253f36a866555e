"""The standing Spark service's HTTP API (:mod:`sleeper_ops.spark.service`, the real
server and job bookkeeping) served from the test's process with an executor of the
test's choosing instead of a SparkSession, so deferrable tasks can be tested without a
76 s standing cluster.

:func:`in_process_executor` runs a bulk import as the real job
(:func:`sleeper_ops.bulk_import.job.bulk_import`: job record, outputs named first, one
commit by import key) with a simple in-process runner in place of Spark's, and a
compaction batch on the local runner (job records, one commit per job). It can hold a
table's jobs at a gate (a :class:`threading.Event`) until the test opens it, which is how
a test keeps a Spark job running while it watches Airflow. Real Spark behind the service
is tested in ``test_spark_service``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from sleeper_ops.spark.service import ServiceJob, SparkService, http_server


def _config(job: ServiceJob) -> Any:
    from sleeper_ops.config import SleeperConfig

    raw = {k: v for k, v in job.request["config"].items() if k != "home"}
    config = SleeperConfig.from_dict(Path(job.request["config"]["home"]), raw)
    return dataclasses.replace(config, spark_service=None)  # the job itself runs here, not on a service


def _wait_at(gates: dict[str, threading.Event], job: ServiceJob) -> None:
    gate = gates.get(job.table)
    if gate is not None and not gate.wait(300):
        raise TimeoutError(f"the test never opened the gate of table {job.table}")


def _local_runner(objects: Any) -> Callable[[Any], list[Any]]:
    from sleeper_ops.bulk_import.job import LeafOutput
    from sleeper_ops.engine.leaves import leaf_indices
    from sleeper_ops.io.arrow_schema import sort_keys
    from sleeper_ops.io.datafile import write_data_file
    from sleeper_ops.io.inputs import read_batches
    from statestore.partitions import PartitionTree

    def run(plan: Any) -> list[Any]:
        data = pa.Table.from_batches([b for f in plan.files for b in read_batches(f, plan.table.schema)])
        out = []
        for leaf, idx in leaf_indices(data, PartitionTree(plan.partitions)):
            part = data if idx is None else data.take(pa.array(idx))
            part = part.take(pc.sort_indices(part, sort_keys=sort_keys(plan.table.schema)))
            w = write_data_file(objects, plan.output_keys[leaf.id], plan.table.schema, part)
            out.append(LeafOutput(leaf.id, w.key, w.record_count))
        return out

    return run


def in_process_executor(gates: dict[str, threading.Event],
                        after_commit: Optional[dict[str, threading.Event]] = None
                        ) -> Callable[[ServiceJob], dict[str, Any]]:
    """Bulk imports through the real job with an in-process runner (see the module
    docstring); a table in ``after_commit`` holds its job, committed, until that gate opens."""

    def execute(job: ServiceJob) -> dict[str, Any]:
        from sleeper_ops.api import Sleeper
        from sleeper_ops.bulk_import.job import bulk_import

        _wait_at(gates, job)
        req = job.request
        with Sleeper(config=_config(job)) as sleeper:
            table = sleeper.state_store.get_table(job.table)
            if job.kind == "compaction":  # the jobs run by the local runner, committed as on Spark
                from sleeper_ops.compaction.jobs import CompactionJob
                from sleeper_ops.compaction.runners import run_local
                from sleeper_ops.spark.batch_files import results_document

                jobs = [CompactionJob.from_dict(d) for d in req.get("jobs") or []]
                return results_document(run_local(sleeper.state_store, sleeper.objects, table, jobs,
                                                  run_id=req.get("run_id")))
            result = bulk_import(sleeper.state_store, sleeper.objects, table, req["sources"],
                                 run=_local_runner(sleeper.objects), import_key=req.get("import_key"),
                                 run_id=req.get("run_id"))
        _wait_at(after_commit or {}, job)
        return {"result": asdict(result), "error": None}

    return execute


@contextlib.contextmanager
def serve(execute: Callable[[ServiceJob], dict[str, Any]]) -> Iterator[tuple[str, SparkService]]:
    """The service's HTTP API on a free loopback port: (its URL, the service)."""
    service = SparkService(None, max_jobs=2, execute=execute)
    server = http_server(service, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, name="spark-service-double", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", service
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll ``condition`` until it is truthy (its value) or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def job_times(service: SparkService) -> list[dict[str, Optional[float]]]:
    """Every job the service knows: table, state, submitted/started/ended (epoch s)."""
    with service._lock:
        jobs = list(service._jobs.values())
    return [{"table": j.table, "state": j.state, "submitted": j.submitted, "started": j.started, "ended": j.ended}
            for j in jobs]
