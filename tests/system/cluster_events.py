"""The event-driven ingest test of tests/system/test_cluster.py: files dropped into the
cluster's bucket under ``incoming/`` at a steady rate (each upload announced by moto's S3
notification to the cluster's events queue), the Celery worker running a ``land_events``
task killed (on that event, seen through Airflow's REST API) and restarted once the
scheduler has failed the task, and the deliveries the table's watcher saw, read back from
its asset events."""

from __future__ import annotations

import io
import json
import threading
import time
from typing import Any, Optional

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from tests.system.cluster_faults import Timeline, worker_of


def event_keys(file: int, records: int) -> list[str]:
    """The keys of dropped file ``file``: distinct across files."""
    return [f"e{file:04d}-{i:03d}" for i in range(records)]


class Dropper(threading.Thread):
    """Uploads ``files`` Parquet files of ``records`` records each to
    ``s3://<bucket>/incoming/`` at ``rate`` files a second (a user's steady drop, not a wait),
    counting them (``uploaded``) and noting when the last upload returned (``last_at``)."""

    def __init__(self, s3: Any, bucket: str, files: int, records: int, rate: float) -> None:
        super().__init__(name="dropper", daemon=True)
        self.s3, self.bucket, self.files, self.records, self.rate = s3, bucket, files, records, rate
        self.uploaded = 0
        self.first_at: Optional[float] = None
        self.last_at: Optional[float] = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            start = time.monotonic()
            self.first_at = start
            for n in range(self.files):
                ahead = start + n / self.rate - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                keys = event_keys(n, self.records)
                buf = io.BytesIO()
                pq.write_table(pa.table({"key": keys, "n": pa.array([n] * len(keys), pa.int64())}), buf)
                self.s3.put_object(Bucket=self.bucket, Key=f"incoming/part-{n:04d}.parquet", Body=buf.getvalue())
                self.uploaded = n + 1
            self.last_at = time.monotonic()
        except BaseException as e:  # reported by the test
            self.error = e


class LandingKill:
    """SIGKILLs the Celery worker that runs a ``land_events`` task of ``dag`` once
    ``after`` files are uploaded, then restarts it once the scheduler has failed that try
    (no heartbeat; the task is then retried on the other worker); ``done`` when the worker
    is back."""

    def __init__(self, cluster: Any, client: httpx.Client, dag: str, log: Timeline, after: int) -> None:
        self.cluster, self.client, self.dag, self.log, self.after = cluster, client, dag, log, after
        self.killed: Optional[tuple[str, str, int]] = None  # worker, run id, try
        self.failed = False
        self.done = False

    def step(self, uploaded: int) -> None:
        if self.killed is None:
            if uploaded >= self.after:
                self._kill()
            return
        if self.done:
            return
        worker, run_id, killed_try = self.killed
        if not self.failed:
            ti = self.client.get(f"/api/v2/dags/{self.dag}/dagRuns/{run_id}/taskInstances/land_events").json()
            if ti.get("state") in ("failed", "success", "up_for_retry") or ti.get("try_number", 0) > killed_try:
                self.failed = True
                self.log(f"the scheduler ended the killed land_events try {killed_try} (no heartbeat): now "
                         f"{ti['state']} on try {ti['try_number']}; restarting {worker}")
                self.cluster.restart(worker, kill=True)
            return
        if "ready" in self.cluster.piece(worker).log.read_text(errors="replace").rsplit("restarted ---", 1)[-1]:
            self.log(f"{worker} is back (Celery worker ready)")
            self.done = True

    def _kill(self) -> None:
        r = self.client.get(f"/api/v2/dags/{self.dag}/dagRuns/~/taskInstances",
                            params={"state": ["running", "queued"], "limit": 100})
        assert r.status_code == 200, r.text
        tis = r.json().get("task_instances", [])
        # a task handed to Celery but not started may sit in the worker's prefetch: killed with
        # it, it would run only when Redis redelivers it (hours)
        if any(ti["state"] == "queued" for ti in tis):
            return
        for ti in tis:
            if ti["task_id"] != "land_events" or not ti.get("pid"):
                continue
            worker = worker_of(self.cluster, int(ti["pid"]))
            if worker is None:
                continue
            self.cluster.kill(worker)
            self.killed = (worker, ti["dag_run_id"], int(ti["try_number"]))
            self.log(f"SIGKILL {worker} (its Celery pool and task processes) while land_events of run "
                     f"{ti['dag_run_id']} ran on it")
            return


def _asset(client: httpx.Client, uri: str) -> Optional[dict[str, Any]]:
    assets = client.get("/api/v2/assets", params={"uri_pattern": uri, "limit": 100}).json()["assets"]
    return next((a for a in assets if a["uri"] == uri), None)


def watcher_trigger(client: httpx.Client, uri: str) -> Optional[int]:
    """The trigger id of the watcher of asset ``uri``, once Airflow has registered it."""
    asset = _asset(client, uri)
    watchers = (asset or {}).get("watchers") or []
    return int(watchers[0]["trigger_id"]) if watchers else None


def deliveries(client: httpx.Client, uri: str) -> tuple[int, int, int]:
    """(asset events, messages delivered, distinct message ids) of the watched asset
    ``uri``: what SQS delivered to the table's watcher, read from its asset events."""
    asset = _asset(client, uri)
    assert asset is not None, uri
    asset_id = asset["id"]
    events: list[dict[str, Any]] = []
    while True:
        page = client.get("/api/v2/assets/events", params={"asset_id": asset_id, "limit": 100,
                                                            "offset": len(events)}).json()["asset_events"]
        events += page
        if len(page) < 100:
            break
    ids = [str(m.get("MessageId")) for e in events
           for m in ((e.get("extra") or {}).get("payload") or {}).get("message_batch") or ()]
    return len(events), len(ids), len(set(ids))


def retried_tries(client: httpx.Client, dag: str, run_id: str, task_id: str, after: int) -> list[str]:
    """One line for each try of ``task_id`` in run ``run_id`` after try ``after`` that did
    not succeed: its state, host, and the error lines of its log (the reason a retry was
    needed; "returned" when its operator had returned, Airflow's "Post Execute" group in its
    log, and Airflow failed the try while ending it)."""
    from tests.airflow_runs import task_log

    r = client.get(f"/api/v2/dags/{dag}/dagRuns/{run_id}/taskInstances/{task_id}/tries")
    assert r.status_code == 200, r.text
    lines = []
    for t in sorted(r.json()["task_instances"], key=lambda t: t["try_number"]):
        if t["try_number"] <= after or t["state"] == "success":
            continue
        text = task_log(client, dag, run_id, task_id, t["try_number"])
        errors = [line[:300] for line in text.splitlines() if _worth_showing(line)][-6:]
        returned = "::group::Post Execute" in text
        lines.append(f"try {t['try_number']} {t['state']} on {t.get('hostname')}"
                     f"{' (returned)' if returned else ''}: " + (" | ".join(errors) or text[-600:]))
    return lines


def _worth_showing(line: str) -> bool:
    """Whether a task log line (one JSON event) is a warning or worse, or names an exit."""
    try:
        level = str(json.loads(line).get("level", "")).lower()
    except (ValueError, AttributeError):
        level = ""
    return level in ("warning", "error", "critical") or any(w in line for w in ("Error", "signal", "exited"))
