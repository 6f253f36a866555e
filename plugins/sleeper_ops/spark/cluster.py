"""A standing Spark standalone cluster on this machine, as separate processes: a master,
workers and the Sleeper Spark service (:mod:`sleeper_ops.spark.service`), each from the
installed pip ``pyspark`` (``spark-class``) and this Python.

:func:`standing_cluster` starts them, in that order, each once the one before is up
(the master elected, every worker registered, the service serving), and stops them
all, in the reverse order, when the ``with`` block ends, however it ends. Each process
is started in a session of its own and stopped by its process id (SIGTERM, then
SIGKILL after a grace period), so nothing else on the machine is touched. Logs go to
``work/<name>.log``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Optional, Sequence

from sleeper_ops.errors import ConfigError

STOP_GRACE_SECONDS = 20.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class Piece:
    """One process of the cluster: what it is, where it answers, its log, and how it was
    started (its command, environment and working directory, so it can be started again)."""

    name: str
    url: str
    log: Path
    process: subprocess.Popen[bytes]
    command: tuple[str, ...] = ()
    env: Optional[dict[str, str]] = None
    cwd: Optional[Path] = None


@dataclass
class StandingCluster:
    """The running cluster: the master's URL, the service's URL and every process."""

    master: str
    service: Optional[str]
    pieces: list[Piece] = field(default_factory=list)

    def describe(self) -> list[str]:
        """One line per process: name, where it answers, process id and log."""
        return [f"{p.name:<14} {p.url:<28} pid {p.process.pid:<8} log {p.log}" for p in self.pieces]


def _spark_class() -> str:
    local = Path(sys.executable).parent / "spark-class"
    if local.is_file():
        return str(local)
    raise ConfigError(f"spark-class not found next to {sys.executable} (pip install pyspark)")


def _wait_for(piece: Piece, pattern: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if piece.log.exists() and re.search(pattern, piece.log.read_text(errors="replace")):
            return
        if piece.process.poll() is not None:
            raise ConfigError(f"the Spark {piece.name} exited with code {piece.process.returncode}: "
                              f"{piece.log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.2)
    raise ConfigError(f"the Spark {piece.name} did not start within {timeout:g} s (see {piece.log})")


def _start(name: str, url: str, cmd: Sequence[str], log: Path, env: dict[str, str]) -> Piece:
    out: IO[bytes] = open(log, "wb")
    try:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    finally:
        out.close()
    return Piece(name, url, log, proc, tuple(cmd), dict(env))


def stop(piece: Piece, grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop ``piece``'s process (SIGTERM; SIGKILL after ``grace`` seconds)."""
    p = piece.process
    if p.poll() is not None:
        return
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(grace)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


@contextlib.contextmanager
def standing_cluster(work: Path, *, workers: int = 2, cores: int = 1, memory: str = "2g",
                     service_port: Optional[int] = 0, master_port: int = 0, max_jobs: int = 2,
                     host: str = "127.0.0.1", timeout: float = 180.0,
                     base_env: Optional[dict[str, str]] = None) -> Iterator[StandingCluster]:
    """Start a master, ``workers`` workers of ``cores`` cores and ``memory`` each and
    (unless ``service_port`` is None) the Spark service on ``service_port`` (0: a free
    port), all on ``host``, with the environment ``base_env`` (default this process's)
    plus Spark's settings; yield the running cluster; stop it all at the end."""
    work = Path(work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ if base_env is None else base_env, SPARK_LOCAL_IP=host, PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(work / "logs"),
               SPARK_WORKER_DIR=str(work / "worker"))
    spark_class = _spark_class()
    port = master_port or free_port(host)
    cluster = StandingCluster(f"spark://{host}:{port}", None)
    try:
        web = free_port(host)
        master = _start("master", cluster.master, [spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                                   host, "--port", str(port), "--webui-port", str(web)],
                        work / "master.log", env)
        cluster.pieces.append(master)
        _wait_for(master, r"I have been elected leader|Starting Spark master", timeout)
        started = []
        for i in range(workers):
            web = free_port(host)
            wdir = work / f"worker-{i + 1}"
            piece = _start(f"worker {i + 1}", f"http://{host}:{web}",
                           [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master, "--host", host,
                            "--cores", str(cores), "--memory", memory, "--webui-port", str(web),
                            "--work-dir", str(wdir)],
                           work / f"worker-{i + 1}.log", {**env, "SPARK_WORKER_DIR": str(wdir)})
            cluster.pieces.append(piece)
            started.append(piece)
        for piece in started:
            _wait_for(piece, r"Successfully registered with master", timeout)
        if service_port is not None:
            ready = work / "service.url"
            ready.unlink(missing_ok=True)
            piece = _start("spark service", "", [sys.executable, "-m", "sleeper_ops.spark.service", "--master",
                                                 cluster.master, "--host", host, "--port", str(service_port),
                                                 "--max-jobs", str(max_jobs), "--executors", str(workers),
                                                 "--ready-file", str(ready)],
                           work / "service.log", env)
            cluster.pieces.append(piece)
            _wait_for(piece, r"Spark service at http", timeout)
            piece.url = cluster.service = ready.read_text().strip()
        yield cluster
    finally:
        for piece in reversed(cluster.pieces):
            stop(piece)
