"""What ``sleeper cluster`` prints once the cluster is ready, and how it waits for Ctrl-C."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Callable, Iterator

from sleeper_ops.cluster.environment import AWS_CONN, SLEEPER_CONN, process_environment
from sleeper_ops.cluster.event_queue import EVENTS_PREFIX
from sleeper_ops.cluster.run import RunningCluster
from statestore.properties import INGEST_EVENTS_QUEUE

#: the line a caller (a user, a test) waits for
READY_LINE = "cluster ready"


def ready_lines(c: RunningCluster) -> list[str]:
    """Where each process is, how to reach the cluster, and the readiness line."""
    layout = c.layout
    worker_env = process_environment(layout, "worker-1")
    lines = ["processes:"] + [f"  {line}" for line in c.describe()]
    lines += [
        f"Airflow: {layout.api_url}  user admin  password {c.admin_password}  (CeleryExecutor, broker "
        f"{layout.broker_url})",
        f"state store: {layout.state_store}; data: s3://{layout.bucket}/data on {layout.aws_endpoint}; "
        f"task logs: {worker_env['AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER']}",
        f"Spark: master {layout.spark_master}, service {layout.spark_service or '(not started)'}",
        f"event-driven ingest: files created under s3://{layout.bucket}/{EVENTS_PREFIX} are announced on "
        f"{c.events_queue} (a table's {INGEST_EVENTS_QUEUE})",
        "connections given to every Airflow process (AIRFLOW_CONN_*):",
        f"  sleeper_default = {worker_env[SLEEPER_CONN]}",
        f"  aws_default     = {worker_env[AWS_CONN]}",
        f"the CLI on this cluster: SLEEPER_HOME={c.client_home} sleeper table list",
        f"{READY_LINE} in {c.started_seconds:.1f} s; Ctrl-C stops it all",
    ]
    return lines


@contextlib.contextmanager
def until_stopped() -> Iterator[Callable[[RunningCluster], str]]:
    """Handle SIGINT and SIGTERM for the life of the block: while the cluster starts, the
    first one raises KeyboardInterrupt (so the start unwinds, stopping what was started);
    later ones only end the wait. Yields ``wait(cluster)``: block until a signal or until
    a process of the cluster exits, and say which."""
    stopped = threading.Event()
    why: list[str] = []
    waiting = threading.Event()

    def on_signal(signum: int, _: Any) -> None:
        first = not stopped.is_set()
        why.append(signal.Signals(signum).name)
        stopped.set()
        if first and not waiting.is_set():
            raise KeyboardInterrupt

    def wait(c: RunningCluster) -> str:
        waiting.set()
        while not stopped.wait(1.0):
            dead = c.dead()
            if dead:
                return dead
        return f"{why[0]} received"

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield wait
    finally:
        waiting.set()
        for s, handler in previous.items():
            signal.signal(s, handler)
