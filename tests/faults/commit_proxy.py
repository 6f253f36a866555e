"""A fault-injecting TCP proxy between the state store and PostgreSQL.

Every connection through :class:`CommitDroppingProxy` is forwarded byte for byte,
until the proxy is armed: then the next client message carrying ``COMMIT``, on a
connection that has sent the arming's ``marker`` (by default ``INSERT INTO file``, which
only a state-store data commit sends) since its last COMMIT, is
forwarded to the server (``after=True``) or not (``after=False``), the server's reply
is withheld, and both sides of that connection are closed (with ``dark=True``, every
other connection too, and no new one is accepted: the server stays out of reach). With ``after=True`` the
server has committed but the client never hears it -- the "unknown outcome" of
DESIGN.md section 10; with ``after=False`` nothing was committed. One drop per arming.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from typing import Optional

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: a Parse message of the frontend protocol: (statement name, query)
_PARSE = re.compile(rb"P.{4}([^\x00]*)\x00([^\x00]*)\x00", re.DOTALL)
#: a Bind message: the statement name it runs (after the portal name)
_BIND = re.compile(rb"B.{4}[^\x00]*\x00([^\x00]+)\x00", re.DOTALL)


class CommitDroppingProxy:
    """A proxy on 127.0.0.1 to ``target_host:target_port``; see the module docstring."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: Optional[bool] = None  # None: pass through; else the "after" of the next drop
        self._marker = b"INSERT INTO file"
        self._commit = b"COMMIT"
        self.drops = 0
        self._dark = False
        self._socks: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name="commit-proxy").start()

    @classmethod
    def for_dsn(cls, dsn: str) -> tuple[CommitDroppingProxy, str]:
        """A proxy to the server of ``dsn`` (TCP or Unix socket), and the DSN through it."""
        params = conninfo_to_dict(dsn)
        proxy = cls(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
        return proxy, make_conninfo(dsn, host="127.0.0.1", port=str(proxy.port))

    def arm(self, *, after: bool, dark: bool = False, marker: bytes = b"INSERT INTO file",
            commit: bytes = b"COMMIT") -> None:
        """Drop the connection at the next COMMIT following ``marker``, after forwarding
        it or before; with ``dark``, then cut every connection and accept no more.
        ``commit``: what commits (e.g. the marker itself, for a statement sent alone on
        an autocommit connection)."""
        with self._lock:
            self._armed = after
            self._dark = dark
            self._marker = marker
            self._commit = commit

    def disarm(self) -> None:
        """Drop nothing (an arming that has not fired is withdrawn)."""
        with self._lock:
            self._armed = None

    def close(self) -> None:
        """Stop accepting, and cut every connection."""
        self._closed = True
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        _close(*socks)

    # ----- forwarding -------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._closed:
                _close(client)
                return
            server = self._connect()
            with self._lock:
                self._socks += [client, server]
            cut = threading.Event()
            threading.Thread(target=self._client_to_server, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(server, client, cut), daemon=True).start()

    def _connect(self) -> socket.socket:
        host, port = self.target
        if host.startswith("/"):  # a Unix socket directory, as libpq reads it
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(f"{host}/.s.PGSQL.{port}")
            return sock
        return socket.create_connection((host, port))

    def _sends_marker(self, data: bytes, prepared: dict[bytes, bytes]) -> bool:
        """Whether ``data`` runs a statement holding the marker: as text, or by the name of
        a statement prepared with it on this connection (``prepared``: name -> query;
        psycopg prepares a statement it runs often, then sends only its name)."""
        for name, query in _PARSE.findall(data):
            if name:
                prepared[name] = query
        if self._marker in data:
            return True
        return any(self._marker in prepared.get(name, b"") for name in _BIND.findall(data))

    def _take_arming(self, data: bytes, seen: list[bool],
                     prepared: Optional[dict[bytes, bytes]] = None) -> Optional[bool]:
        """``seen[0]``: this connection sent the marker since its last COMMIT;
        ``prepared``: the statements it prepared, by name."""
        if self._sends_marker(data, prepared if prepared is not None else {}):
            seen[0] = True
        if self._commit not in data:
            return None
        if not seen[0]:
            return None
        seen[0] = False
        with self._lock:
            after, self._armed = self._armed, None
            if after is not None:
                self.drops += 1
            return after

    def _client_to_server(self, client: socket.socket, server: socket.socket, cut: threading.Event) -> None:
        seen = [False]
        prepared: dict[bytes, bytes] = {}
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                after = self._take_arming(data, seen, prepared)
                if after is None:
                    server.sendall(data)
                    continue
                cut.set()  # withhold every reply from now on
                if after:
                    server.sendall(data)
                    time.sleep(0.3)  # let the server commit before it sees the connection go
                if self._dark:
                    self.close()
                break
        except OSError:
            pass
        finally:
            _close(client, server)

    @staticmethod
    def _server_to_client(server: socket.socket, client: socket.socket, cut: threading.Event) -> None:
        """Forward replies until the cut; then drop them and leave the closing to the
        other direction (which closes once the server has had time to commit)."""
        try:
            while True:
                data = server.recv(65536)
                if cut.is_set():
                    return
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        _close(client, server)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
