"""``sleeper cluster --state-store dynamodb`` as a user runs it: started as a process, a
table created and written with the CLI against the cluster's stores, its flush DAG run
through Airflow's REST API on a Celery worker (which has no Sleeper files and no
``SLEEPER_HOME``: everything from the ``sleeper_default`` and ``aws_default``
connections), the records read back exactly, then Ctrl-C stops every process it started.

Without Spark (``--no-spark``): the flush runs in the worker, and the standing Spark
cluster has tests of its own; this one checks the Airflow/Celery/moto shape."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from tests.cluster_helpers import cluster_work_dir, one_cluster_at_a_time, processes_using

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).with_name("sleeper"))
READY_LINE = "cluster ready"
TABLE = "shape"
RECORDS = [{"key": f"k{i:04d}", "n": i} for i in range(500)]
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}
START_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The running cluster: its work dir, client home, API URL and admin password; at
    the end, Ctrl-C and the check that nothing it started is left."""
    with one_cluster_at_a_time(tmp_path_factory):
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed (make redis)")
        work = cluster_work_dir(tmp_path_factory, "cluster-shape")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
        # A user's shell may name a Sleeper of its own: no cluster process may use it (a task or
        # DAG parse that did would fail on its unreachable state store).
        decoy = work / "decoy"
        decoy.mkdir()
        (decoy / "sleeper.toml").write_text('[state_store]\ndsn = "postgresql://nobody@127.0.0.1:9/none"\n')
        env.update(SLEEPER_HOME=str(decoy), SLEEPER_STATE_STORE_DSN="postgresql://nobody@127.0.0.1:9/none")
        out = open(work / "cluster.out", "w+")
        started = time.monotonic()
        proc = subprocess.Popen([SLEEPER, "--home", str(work / "home"), "cluster", "--state-store", "dynamodb",
                                 "--port", "0", "--no-spark", "--work-dir", str(work / "w"),
                                 "--timeout", str(START_TIMEOUT)],
                                stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work)
        try:
            text = ""
            deadline = time.monotonic() + START_TIMEOUT + 30
            while READY_LINE not in text:
                assert proc.poll() is None, f"sleeper cluster exited {proc.returncode}:\n{text}"
                assert time.monotonic() < deadline, f"sleeper cluster not ready in time:\n{text}"
                time.sleep(0.5)
                text = (work / "cluster.out").read_text()
            print(f"sleeper cluster ready in {time.monotonic() - started:.1f} s:\n{text}")
            info = {"work": str(work / "w"), "text": text}
            for line in text.splitlines():
                if line.startswith("Airflow: "):
                    parts = line.split()
                    info["api"], info["password"] = parts[1], parts[5]
                if line.startswith("the CLI on this cluster: SLEEPER_HOME="):
                    info["client_home"] = line.split("SLEEPER_HOME=", 1)[1].split()[0]
                if line.strip().startswith("airflow worker-"):
                    info[line.split()[1]] = line.split(" pid ")[1].split()[0]
            yield info
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
            out.close()
        text = (work / "cluster.out").read_text()
        assert code == 0, text
        assert "SIGINT received: stopped the cluster" in text
        left = processes_using(str(work / "w"))
        assert left == [], f"processes left behind by sleeper cluster: {left}"
        shutil.rmtree(work, ignore_errors=True)


def _sleeper(home: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
    env.update(SLEEPER_HOME=home, AWS_EC2_METADATA_DISABLED="true")
    p = subprocess.run([SLEEPER, *args], env=env, cwd=home, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"sleeper {' '.join(args)}: exit {p.returncode}: {p.stderr}"
    return p.stdout


def test_the_celery_workers_work_in_folders_of_their_own(cluster):
    for worker in ("worker-1", "worker-2"):
        assert os.readlink(f"/proc/{cluster[worker]}/cwd") == str(Path(cluster["work"], worker))


def test_a_dag_run_on_a_celery_worker_flushes_cli_writes_into_the_dynamodb_cluster(cluster):
    home = cluster["client_home"]
    Path(home, "schema.json").write_text(json.dumps(SCHEMA))
    Path(home, "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    manual_only = [arg for op in ("flush", "split", "compaction", "gc", "ingest_batcher")
                   for arg in ("--property", f"sleeper.table.schedule.{op}=none")]
    _sleeper(home, "table", "create", TABLE, "--schema", str(Path(home, "schema.json")), *manual_only)
    _sleeper(home, "write", TABLE, str(Path(home, "records.jsonl")))
    assert _sleeper(home, "query", TABLE, "--range", '""', "null", "--no-buffer") == ""  # only in the buffer yet

    dag_id = f"sleeper_{TABLE}_flush"
    with httpx.Client(base_url=cluster["api"], timeout=90.0) as client:
        token = client.post("/auth/token", json={"username": "admin", "password": cluster["password"]}).json()
        client.headers["Authorization"] = f"Bearer {token['access_token']}"
        deadline = time.monotonic() + 90
        while client.get(f"/api/v2/dags/{dag_id}").status_code != 200:  # the DAG processor has parsed it
            assert time.monotonic() < deadline, f"DAG {dag_id} never appeared"
            time.sleep(1.0)
        r = client.post(f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None})
        assert r.status_code == 200, r.text
        run_id = r.json()["dag_run_id"]
        deadline = time.monotonic() + 120
        while (state := client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}").json()["state"]) not in (
                "success", "failed"):
            assert time.monotonic() < deadline, f"run {run_id} still {state}"
            time.sleep(1.0)
        ti = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/flush").json()
    assert state == "success", ti
    assert ti["executor"] in (None, "CeleryExecutor") and ti["queue"] == "default", ti
    worker_logs = [p for w in ("worker-1", "worker-2")
                   for p in Path(cluster["work"], w).rglob(f"dag_id={dag_id}/**/*.log")]
    assert len(worker_logs) == 1, f"the flush task's log is not in exactly one Celery worker's folder: {worker_logs}"

    lines = _sleeper(home, "query", TABLE, "--range", '""', "null", "--no-buffer").splitlines()
    assert sorted(json.loads(line)["key"] for line in lines) == [r["key"] for r in RECORDS]
    assert sorted((json.loads(line)["key"], json.loads(line)["n"]) for line in lines) == \
        [(r["key"], r["n"]) for r in RECORDS]
