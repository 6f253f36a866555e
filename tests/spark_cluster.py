"""Test support: a Spark standalone cluster (one master, one worker) from the installed
pyspark, on 127.0.0.1, for tests that want a real distributed engine rather than
``local[N]``. The worker's executors run this Python (``PYSPARK_PYTHON``)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen[bytes], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and re.search(pattern, log.read_text(errors="replace")):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"Spark process exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    raise RuntimeError(f"Spark did not report {pattern!r} within {timeout:g}s: {tail}")


def standalone_cluster(work: Path, cores: int = 2, memory: str = "1g") -> Iterator[str]:
    """Start a master and a worker; yield the master URL ``spark://127.0.0.1:PORT``;
    stop both afterwards."""
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(work / "worker"), SPARK_LOG_DIR=str(work / "logs"))
    master_log, worker_log = work / "master.log", work / "worker.log"
    master = subprocess.Popen([str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                              stdout=open(master_log, "wb"), stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    url = f"spark://127.0.0.1:{port}"
    worker = None
    try:
        _wait_for(master_log, r"I have been elected leader|Starting Spark master", master)
        worker = subprocess.Popen([str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url,
                                   "--cores", str(cores), "--memory", memory, "--host", "127.0.0.1",
                                   "--webui-port", str(_free_port()), "--work-dir", str(work / "worker")],
                                  stdout=open(worker_log, "wb"), stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        _wait_for(worker_log, r"Successfully registered with master", worker)
        yield url
    finally:
        for p in (worker, master):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
