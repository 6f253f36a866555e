"""One ``dag_runner.py serve`` process per AIRFLOW_HOME and DAG folder, per pytest worker.

Starting Airflow costs a fresh interpreter about 15 s of CPU before its first task runs
(imports, then building the in-process execution API on the first request), which is
most of a DAG test's time; later runs in the same interpreter start their task in a
tenth of a second. :func:`run_in_server` sends one test's runs to the server for its
AIRFLOW_HOME (started on first use, stopped when the worker exits) and returns the
output of those runs alone. Runs that need their own Airflow settings (``AIRFLOW*``
variables, which Airflow reads at import) or their own process (two runs at once) are
not for the server: the caller starts a fresh ``dag_runner.py test`` for those.
"""

from __future__ import annotations

import atexit
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Optional

RUNNER = Path(__file__).with_name("dag_runner.py")
DONE = "=== DONE ==="


class DagServer:
    """A ``dag_runner.py serve`` subprocess and a thread draining its output."""

    def __init__(self, folder: Path, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(RUNNER), "serve", str(folder)], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, bufsize=1)
        self.lines: queue.Queue[Optional[str]] = queue.Queue()
        self.pending = 0  # requests sent whose output is not collected yet
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)  # the server exited

    def request(self, request: dict, timeout: float) -> str:
        """The output of ``request`` (see ``dag_runner.py serve``), up to the server's end
        marker. Raises AssertionError when the server exits or takes longer than ``timeout``."""
        self.submit(request)
        return self.collect(timeout)

    def submit(self, request: dict) -> None:
        """Send ``request`` and return at once: the server works on it while the caller
        goes on; :meth:`collect` gives its output. A request whose output nobody
        collected (its test failed first) is waited for and its output dropped first."""
        while self.pending:
            self.collect(300)
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        self.pending += 1

    def collect(self, timeout: float) -> str:
        """The output of the request submitted last, up to the server's end marker (see
        :meth:`request` for the errors)."""
        out: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                tail = "".join(out)[-4000:]
                raise AssertionError(f"the DAG server gave no answer in {timeout:.0f} s:\n{tail}") from None
            if line is None:
                raise AssertionError(f"the DAG server exited ({self.proc.wait()}):\n{''.join(out)[-4000:]}")
            if line.rstrip("\n") == DONE:
                self.pending -= 1
                return "".join(out)
            out.append(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


_servers: dict[tuple[str, str], DagServer] = {}


def run_in_server(folder: Path, airflow_home: Path, base_env: dict[str, str], env: dict[str, str],
                  runs: list[dict], timeout: float = 300) -> str:
    """Make ``runs`` in the server for ``airflow_home`` (started with ``base_env``), with
    ``env`` set for these runs only; the runs' output."""
    return _server(folder, airflow_home, base_env).request({"env": env, "runs": runs}, timeout)


def start_in_server(folder: Path, airflow_home: Path, base_env: dict[str, str], env: dict[str, str],
                    runs: list[dict]) -> DagServer:
    """Send ``runs`` to the server for ``airflow_home`` and ``folder`` and return at once
    (the test acts while the runs go on); the server's ``collect`` gives their output."""
    server = _server(folder, airflow_home, base_env)
    server.submit({"env": env, "runs": runs})
    return server


def parse_in_server(folder: Path, airflow_home: Path, base_env: dict[str, str], env: dict[str, str],
                    cwd: Path, timeout: float = 300) -> str:
    """Parse ``folder`` as ``dag_runner.py parse`` does, in the server for ``airflow_home``,
    with ``env`` set and ``cwd`` the working directory for this parse only; its output."""
    return _server(folder, airflow_home, base_env).request({"env": env, "parse": str(folder), "cwd": str(cwd)},
                                                          timeout)


def _server(folder: Path, airflow_home: Path, base_env: dict[str, str]) -> DagServer:
    key = (str(airflow_home), str(folder))
    server = _servers.get(key)
    if server is None or server.proc.poll() is not None:
        server = _servers[key] = DagServer(folder, airflow_home, base_env)
    return server


@atexit.register
def _stop_all() -> None:
    for server in _servers.values():
        server.stop()
