"""The faults of tests/system/test_cluster.py and what it records of them: REST writers
that resend each request with its ``Idempotency-Key`` until acknowledged, the three kills
(each fired once, on an event seen through Airflow's REST API, the Spark service or the
state store) with what recovered each, and the timeline they are logged on."""

from __future__ import annotations

import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

import httpx

from tests.cluster_helpers import airflow_client

#: compaction tasks seen running whose job ended before the kill could land, before the
#: Celery worker is killed at any moment of the task
MISSES_BEFORE_ANY_MOMENT = 3


class Timeline:
    """(elapsed seconds, event) lines, printed at the end."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.events: list[tuple[float, str]] = []

    def __call__(self, event: str) -> None:
        self.events.append((time.monotonic() - self.start, event))

    def text(self) -> str:
        return "\n".join(f"{t:7.1f} s  {e}" for t, e in self.events)


class Writer(threading.Thread):
    """Writes batches of ``batch`` new records over REST until stopped, each request with
    its own ``Idempotency-Key``, sent again with it (same body) until acknowledged (201)."""

    def __init__(self, n: int, api: str, password: str, table: str, stop: threading.Event, batch: int = 25) -> None:
        super().__init__(name=f"writer-{n}", daemon=True)
        self.n, self.api, self.password, self.table, self.stop, self.batch = n, api, password, table, stop, batch
        self.acked: list[str] = []
        self.resent = 0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            client = airflow_client(self.api, self.password)
            try:
                batch = 0
                while not self.stop.is_set():
                    keys = [f"w{self.n}-{batch:04d}-{i:02d}" for i in range(self.batch)]
                    body = {"records": [{"key": k, "n": self.n} for k in keys]}
                    self._send(client, f"writer-{self.n}-batch-{batch}", body)
                    self.acked += keys
                    batch += 1
                    self.stop.wait(1.0)
            finally:
                client.close()
        except BaseException as e:  # reported by the test
            self.error = e

    def _send(self, client: httpx.Client, key: str, body: dict[str, Any]) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = client.post(f"/sleeper/api/v1/tables/{self.table}/records", json=body,
                                headers={"Idempotency-Key": key})
                if r.status_code == 201:
                    return
                assert r.status_code in (409, 429, 503), f"{key}: {r.status_code} {r.text}"
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"{key} never acknowledged"
            self.resent += 1
            time.sleep(0.5)



def worker_of(cluster: Any, pid: int) -> Optional[str]:
    """The Celery worker (``airflow worker-1`` or ``-2``) process ``pid`` runs under, if any."""
    chain = _ancestors(pid)
    return next((n for n in ("airflow worker-1", "airflow worker-2") if cluster.piece(n).process.pid in chain), None)


def _ancestors(pid: int) -> list[int]:
    out = []
    while pid > 1:
        out.append(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rfind(")") + 2:].split()[1])
    return out


class Chaos:
    """The three faults, each fired once on an event, and what recovered each."""

    def __init__(self, cluster: Any, client: httpx.Client, log: Timeline, table: str, jobs: Callable[[], list[Any]],
                 heartbeat_timeout: int) -> None:
        self.cluster, self.client, self.log, self.table, self.jobs = cluster, client, log, table, jobs
        self.heartbeat_timeout = heartbeat_timeout
        self.missed = 0
        self.failed_seen = False
        self.celery_killed: Optional[tuple[str, str, str]] = None  # worker, run id, try
        self.celery_done = False
        #: the state Airflow gave the killed run_local: failed, or success when the task had
        #: reported its end just before the kill
        self.killed_state: Optional[str] = None
        self.spark_killed_at: Optional[float] = None
        self.spark_done = False
        self.scheduler_restarted_at: Optional[datetime] = None
        self.scheduler_done = False
        self.worker_lost_seen = False

    @property
    def done(self) -> bool:
        return self.celery_done and self.spark_done and self.scheduler_done

    def step(self, imported: int) -> None:
        self._celery()
        self._spark()
        self._scheduler(imported)

    # a Celery worker, while a compaction job runs on it
    def _celery(self) -> None:
        dag = f"sleeper_{self.table}_compaction"
        if self.celery_killed is None:
            running = self._running_tasks()
            for ti, worker in running:
                if ti["dag_id"] != dag or ti["task_id"] != "run_local":
                    continue
                # a dated import's task killed retries after its retry delay (2 min): longer than this test
                if any(w == worker and t["dag_id"].endswith("_bulk_import") for t, w in running):
                    continue
                what = self._job_started(f"{dag}/{ti['dag_run_id']}")
                if what is None:
                    self.missed += 1
                    if self.missed < MISSES_BEFORE_ANY_MOMENT:
                        continue
                    what = "before its job started (its jobs were too quick to catch)"
                # a task handed to Celery but not started yet may sit in this worker's prefetch: killed
                # with it, it would run only when Redis redelivers it (hours) or Airflow's queued
                # timeout fails it (10 min), not within this test. Looked at before the running tasks:
                # a task that leaves "queued" between the two reads is then seen running (the other
                # order misses it, and a dated import killed so retries 2 minutes later)
                if self._queued_tasks():
                    continue
                # looked at again just before the kill: a dated import may have started on it meanwhile
                now = [t for t, w in self._running_tasks() if w == worker and t != ti and t["task_id"] != "run_local"]
                if any(t["dag_id"].endswith("_bulk_import") for t in now):
                    continue
                also = [f"{t['dag_id']}.{t['task_id']}" for t in now]
                self.cluster.kill(worker)
                self.celery_killed = (worker, ti["dag_run_id"], str(ti["try_number"]))
                self.log(f"SIGKILL {worker} (its Celery pool and task processes) while run_local of compaction run "
                         f"{ti['dag_run_id']} ran on it (task pid {ti['pid']}), {what}"
                         + (f"; it also ran {', '.join(also)}" if also else ""))
                return
            return
        if self.celery_done:
            return
        name, run_id, _ = self.celery_killed
        tis = self.client.get(f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
        states = {ti["task_id"]: ti["state"] for ti in tis}
        if states.get("run_local") in ("failed", "success") and not self.failed_seen:
            self.failed_seen = True
            self.killed_state = states["run_local"]
            self.log(f"the scheduler marked the killed run_local {states['run_local']} (no heartbeat for "
                     f"{self.heartbeat_timeout} s); restarting {name}")
            self.cluster.restart(name, kill=True)
        if self.failed_seen and states.get("report") in ("success", "failed", "skipped"):
            ready = "ready" in self.cluster.piece(name).log.read_text(errors="replace").rsplit("restarted ---", 1)[-1]
            if ready:
                self.log(f"the run's teardown report ended {states['report']} on a live worker (the compaction "
                         f"lease released); {name} is back (Celery worker ready)")
                self.celery_done = True

    def _running_tasks(self) -> list[tuple[dict[str, Any], str]]:
        """The table's running task instances with the Celery worker each runs on."""
        r = self.client.get("/api/v2/dags/~/dagRuns/~/taskInstances", params={"state": "running", "limit": 100})
        out = []
        for ti in r.json().get("task_instances", []) if r.status_code == 200 else []:
            if not ti["dag_id"].startswith(f"sleeper_{self.table}_") or not ti.get("pid"):
                continue
            worker = worker_of(self.cluster, int(ti["pid"]))
            if worker is not None:
                out.append((ti, worker))
        return out

    def _queued_tasks(self) -> list[dict[str, Any]]:
        """The table's task instances handed to the executor and not started yet."""
        r = self.client.get("/api/v2/dags/~/dagRuns/~/taskInstances", params={"state": "queued", "limit": 100})
        assert r.status_code == 200, r.text
        return [ti for ti in r.json().get("task_instances", []) if ti["dag_id"].startswith(f"sleeper_{self.table}_")]

    def _job_started(self, run_label: str) -> Optional[str]:
        """Poll the state store until a compaction job of ``run_label`` is started (then
        say which) or none of them can be any more (None)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            jobs = [j for j in self.jobs() if j.run_id == run_label]
            started = [j for j in jobs if j.status == "started"]
            if started:
                return f"its compaction job {started[0].job_id} started (outputs named: {len(started[0].outputs)})"
            if jobs and all(j.status in ("finished", "committed", "failed") for j in jobs):
                return None
            time.sleep(0.1)
        return None

    # a Spark worker, while a bulk import job runs on the Spark service
    def _spark(self) -> None:
        service = self.cluster.layout.spark_service
        if self.spark_killed_at is None:
            try:
                jobs = httpx.get(f"{service}/health", timeout=5).json().get("jobs", {})
            except httpx.HTTPError:
                return
            if jobs.get("running"):
                self.cluster.kill("worker 1")
                self.spark_killed_at = time.monotonic()
                self.log(f"SIGKILL Spark worker 1 (and its executor) while the Spark service ran {jobs['running']} "
                         "bulk import job(s)")
            return
        if self.spark_done:
            return
        if not self.worker_lost_seen and self.executor_lost():
            self.worker_lost_seen = True
            self.log("the Spark driver (service) saw the executor lost and resubmits its tasks to the other one")
        jobs = httpx.get(f"{service}/health", timeout=5).json().get("jobs", {})
        if not jobs.get("running"):
            self.log(f"the Spark service's job(s) ended: {jobs} (its jobs so far by state)")
            self.spark_done = True

    def executor_lost(self) -> bool:
        """Whether the Spark service's driver lost an executor (the killed worker's), as its
        log says: the kill hit the import's executor, not an idle worker."""
        service_log = next(p for p in self.cluster.spark.pieces if p.name == "spark service").log
        text = service_log.read_text(errors="replace")
        return "Lost executor" in text or "Executor lost" in text or "remove executor" in text.lower()

    # the scheduler, once the first date is imported
    def _scheduler(self, imported: int) -> None:
        if self.scheduler_restarted_at is None:
            if imported >= 1:
                self.scheduler_restarted_at = datetime.now().astimezone()
                self.cluster.restart("airflow scheduler")
                self.log("restarted the scheduler (SIGTERM, then started again) after the first date was imported")
            return
        if self.scheduler_done:
            return
        health = self.client.get("/api/v2/monitor/health").json().get("scheduler", {})
        beat = health.get("latest_scheduler_heartbeat")
        if health.get("status") == "healthy" and beat and datetime.fromisoformat(beat) > self.scheduler_restarted_at:
            text = self.cluster.piece("airflow scheduler").log.read_text(errors="replace")
            adopted = [line.strip()[:160] for line in text.rsplit("restarted ---", 1)[-1].splitlines()
                       if "dopt" in line]
            self.log("the new scheduler heartbeats (healthy)" + (f"; its log: {adopted[0]}" if adopted else ""))
            self.scheduler_done = True
