"""Helpers of the tests of ``sleeper cluster`` (tests/system/test_cluster.py starts it in
process, to kill its pieces; tests/integration/test_cluster_cli.py runs the command on a
stand-in): a
work folder the embedded PostgreSQL can use, Airflow's REST API with a token, polling with
a deadline, and the check that nothing the cluster started is left."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import pytest

from tests.airflow_db import shared_root


def cluster_work_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A fresh folder for a cluster: under pytest's temp folder, except as root, where the
    embedded PostgreSQL's user (root runs it as another) must reach it (not under a 0700 folder)."""
    if os.geteuid() == 0:
        return Path(tempfile.mkdtemp(prefix=f"sleeper-{name}-"))
    return tmp_path_factory.mktemp(name)


@contextlib.contextmanager
def one_cluster_at_a_time(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Holds the test run's one cluster slot (a lock in the folder all xdist workers share)
    while a module's cluster lives: two clusters of a dozen processes each at once on 2
    cores starved their Airflow API servers past the clients' 30 s timeouts (a CI run
    failed both cluster modules so)."""
    with open(shared_root(tmp_path_factory) / "sleeper-cluster.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def processes_using(path: str) -> list[str]:
    """``pid cmdline`` of every process whose command line, environment or working
    directory names ``path`` (this test's own process aside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            env = (entry / "environ").read_bytes().decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
        except (OSError, PermissionError):
            continue
        if path in cmd or path in env or cwd.startswith(path):
            found.append(f"{entry.name} {cmd[:200]}")
    return found


def airflow_client(api: str, password: str, timeout: float = 90.0) -> httpx.Client:
    """A client of Airflow's REST API at ``api``, signed in as ``admin``."""
    client = httpx.Client(base_url=api, timeout=timeout)
    token = client.post("/auth/token", json={"username": "admin", "password": password})
    assert token.status_code in (200, 201), token.text
    client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"
    return client


def poll(check: Callable[[], Any], what: str, timeout: float, interval: float = 0.5) -> Any:
    """``check()``'s first truthy answer, polled every ``interval`` s; fails naming ``what``
    after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(interval)
