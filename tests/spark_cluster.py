"""Test support: a Spark standalone cluster (one master, N workers) from the installed
pyspark, on loopback addresses, for tests that want a real distributed engine rather
than ``local[N]``. The workers' executors run this Python (``PYSPARK_PYTHON``).

Worker ``i`` listens on ``127.0.0.(i+1)``: Spark never runs a speculative copy of a task
on a host where the task already runs, so workers that should take each other's
speculative copies need distinct host names. The master is on ``127.0.0.1``."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import psutil

BIN = Path(sys.executable).parent
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


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


def standalone_cluster(work: Path, cores: int = 2, memory: str = "1g", workers: int = 1) -> Iterator[str]:
    """Start a master and ``workers`` workers of ``cores`` cores each; yield the master
    URL ``spark://127.0.0.1:PORT``; stop them all afterwards."""
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_WORKER_DIR=str(work / "worker"), SPARK_LOG_DIR=str(work / "logs"))
    master_log = work / "master.log"
    master = subprocess.Popen([str(BIN / "spark-class"), "org.apache.spark.deploy.master.Master", "--host",
                               "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                              stdout=open(master_log, "wb"), stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen[bytes]] = []
    try:
        _wait_for(master_log, r"I have been elected leader|Starting Spark master", master)
        logs = []
        for i in range(workers):
            host = f"127.0.0.{i + 1}"
            suffix = "" if i == 0 else f"-{i + 1}"
            log, work_dir = work / f"worker{suffix}.log", work / f"worker{suffix}"
            started.append(subprocess.Popen(
                [str(BIN / "spark-class"), "org.apache.spark.deploy.worker.Worker", url, "--cores", str(cores),
                 "--memory", memory, "--host", host, "--webui-port", str(_free_port()), "--work-dir", str(work_dir)],
                stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                env={**env, "SPARK_LOCAL_IP": host, "SPARK_WORKER_DIR": str(work_dir)}, start_new_session=True))
            logs.append(log)
        for log, proc in zip(logs, started):
            _wait_for(log, r"Successfully registered with master", proc)
        yield url
    finally:
        for p in [*reversed(started), master]:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def executor_of(pid: int) -> psutil.Process:
    """The Spark executor JVM running the Python worker ``pid`` (its nearest ancestor
    whose command line names :data:`EXECUTOR_CLASS`)."""
    for p in psutil.Process(pid).parents():
        if EXECUTOR_CLASS in " ".join(p.cmdline()):
            return p
    raise LookupError(f"process {pid} runs under no Spark executor")
