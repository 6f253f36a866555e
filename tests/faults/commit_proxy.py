"""A fault-injecting TCP proxy between the state store and PostgreSQL.

Every connection through :class:`CommitDroppingProxy` is forwarded byte for byte,
until the proxy is armed: then the next client message carrying ``COMMIT``, on a
connection that has sent the arming's ``marker`` (by default ``INSERT INTO file``, which
only a state-store data commit sends) since its last COMMIT, is
forwarded to the server (``after=True``) or not (``after=False``), the server's reply
is withheld, and both sides of that connection are closed (with ``dark=True``, every
other connection too, and no new one is accepted: the server stays out of reach).

With ``after=True`` the rest of the client's message is forwarded too (a large
statement spans many reads), and the connection is cut only once the server has
answered that it committed: its reply carries the commit's completion tag and ends
ready for a new transaction. That drop is counted in :attr:`CommitDroppingProxy.applied`
-- the server committed and the client never heard it, the "unknown outcome" of
DESIGN.md section 10 -- so a test can tell it from a drop before the server finished
(counted in :attr:`drops` only). With ``after=False`` nothing was committed. One drop
per arming.
"""

from __future__ import annotations

import re
import socket
import threading
from typing import Optional

from psycopg.conninfo import conninfo_to_dict, make_conninfo

#: a Parse message of the frontend protocol: (statement name, query)
_PARSE = re.compile(rb"P.{4}([^\x00]*)\x00([^\x00]*)\x00", re.DOTALL)
#: a Bind message: the statement name it runs (after the portal name)
_BIND = re.compile(rb"B.{4}[^\x00]*\x00([^\x00]+)\x00", re.DOTALL)
#: ReadyForQuery, idle: the server finished everything sent and holds no transaction open
_IDLE = b"Z\x00\x00\x00\x05I"
#: CommandComplete tags that say a transaction committed (COMMIT; an autocommit INSERT)
_COMMITTED = re.compile(rb"C.{4}(COMMIT|INSERT 0 [1-9][0-9]*)\x00", re.DOTALL)
#: how long a cut "after" connection waits for the server's answer before cutting anyway
_ANSWER_WAIT_S = 30.0


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
        #: connections cut at an arming (before or after the server committed)
        self.drops = 0
        #: of those, the ones cut after the server answered that it committed
        self.applied = 0
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
            cut = _Cut()
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

    def _client_to_server(self, client: socket.socket, server: socket.socket, cut: _Cut) -> None:
        """Forward the client's messages. At the armed commit: with ``after``, keep
        forwarding (the rest of the message) and leave the cut to the other direction,
        once the server has answered; without, cut at once."""
        seen = [False]
        prepared: dict[bytes, bytes] = {}
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                if cut.after:
                    server.sendall(data)
                    continue
                after = self._take_arming(data, seen, prepared)
                if after is None:
                    server.sendall(data)
                elif after:
                    server.settimeout(_ANSWER_WAIT_S)  # the server's answer is awaited this long at most
                    cut.cut(after=True)  # every reply withheld from now on
                    server.sendall(data)
                else:
                    cut.cut(after=False)
                    break
        except OSError:
            pass
        if cut.after:
            return  # the other direction cuts once the server has answered
        if cut.is_set() and self._dark:
            self.close()
        _close(client, server)

    def _server_to_client(self, server: socket.socket, client: socket.socket, cut: _Cut) -> None:
        """Forward the server's replies until the cut; after it, withhold them, and with
        ``after`` read the answer to the commit until the server is idle again, count it
        in :attr:`applied` when it says the transaction committed, and cut. An answer
        ending idle without a commit (to a Parse sent alone to prepare the statement) is
        passed on, and the wait goes on."""
        got = b""
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                if not cut.is_set():
                    client.sendall(data)
                    continue
                if not cut.after:
                    return  # cut before the commit: the other direction closes
                got += data
                if not got.endswith(_IDLE):
                    continue
                failed = b"E" in _message_types(got)
                if _COMMITTED.search(got) and not failed:
                    with self._lock:
                        self.applied += 1
                    break
                if failed:
                    break  # the statement failed: nothing committed
                client.sendall(got)  # the answer to a step before the commit (psycopg's prepare): pass it on
                got = b""
        except OSError:
            pass
        if cut.after and self._dark:
            self.close()
        _close(client, server)


class _Cut:
    """One connection's cut: not yet, or at an armed commit forwarded (``after``) or not."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.after = False

    def cut(self, *, after: bool) -> None:
        self.after = after
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


def _message_types(answer: bytes) -> bytes:
    """The message types of ``answer`` walked from its start (an ErrorResponse is 'E');
    empty when the framing cannot be walked from its start (the answer then counts as
    committed only by its tag)."""
    types = bytearray()
    i = 0
    while i + 5 <= len(answer):
        kind, length = answer[i:i + 1], int.from_bytes(answer[i + 1:i + 5], "big")
        if length < 4 or not kind.isalpha():
            return b""
        types += kind
        i += 1 + length
    return bytes(types)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
