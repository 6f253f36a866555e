"""A fault-injecting HTTP proxy in front of an AWS endpoint (moto's server): DynamoDB
and S3 requests through it are forwarded whole, the server's answer is read whole, and
then, when a fault rule matches, the answer is replaced:

* ``lost``: the request applied, the reply is dropped (the client's connection is
  closed without an answer) -- botocore and the AWS SDK retry it, so a write may arrive
  twice;
* ``throttle``: the request is not forwarded; DynamoDB gets 400
  ``ThrottlingException`` (or ``ProvisionedThroughputExceededException``), S3 gets 503
  ``SlowDown``;
* ``error``: the request applied, and the answer is 500 ``InternalServerError``
  (DynamoDB) / ``InternalError`` (S3): an outcome the client cannot know.

A rule matches on the DynamoDB operation (the ``X-Amz-Target`` header, e.g.
``PutItem``), on the HTTP method and a path pattern (S3), and optionally on bytes in
the request body (e.g. a table name), and fires for the next ``times`` matching
requests, or with a probability drawn from a seeded RNG (each rule's own, when it is
given a ``seed``: its draws then follow only the requests it matches, not every other
rule's traffic from other threads). Being a real server, it works
across processes (a CLI or Spark worker pointed at :attr:`FaultProxy.url`).
"""

from __future__ import annotations

import http.client
import json
import random
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import urlsplit

KINDS = ("lost", "throttle", "error")

_S3_ERRORS = {"throttle": (503, "SlowDown", "Please reduce your request rate."),
              "error": (500, "InternalError", "We encountered an internal error. Please try again.")}
_DYNAMO_ERRORS = {"throttle": (400, "com.amazonaws.dynamodb.v20120810#ThrottlingException", "Rate exceeded"),
                  "error": (500, "com.amazonaws.dynamodb.v20120810#InternalServerError", "Internal server error")}
_PROVISIONED = "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException"


@dataclass
class Rule:
    """Fire ``kind`` on requests matching every given criterion: ``operation`` (the
    DynamoDB target's operation name, e.g. ``"PutItem"``; ``"*"``: any DynamoDB
    request), ``method`` and ``path`` (a regular expression searched in the path and
    query, for S3: ``"*"`` for any S3 request), ``body`` (bytes the body contains).
    ``times``: for that many matches (None: every match, each with ``probability``)."""

    kind: str
    operation: Optional[str] = None
    method: Optional[str] = None
    path: Optional[str] = None
    body: Optional[bytes] = None
    times: Optional[int] = 1
    probability: float = 1.0
    provisioned: bool = False  # throttle DynamoDB with ProvisionedThroughputExceededException
    fired: int = 0
    #: this rule's own RNG (None: the proxy's)
    rng: Optional[random.Random] = None

    def matches(self, target: Optional[str], method: str, path: str, body: bytes) -> bool:
        if self.operation is not None:
            if target is None or (self.operation != "*" and target.rsplit(".", 1)[-1] != self.operation):
                return False
        if self.method is not None and method != self.method:
            return False
        if self.path is not None:
            if target is not None:
                return False
            if self.path != "*" and not re.search(self.path, path):
                return False
        return self.body is None or self.body in body


@dataclass
class FaultCounts:
    """How many requests went through and how many of each fault fired."""

    requests: int = 0
    fired: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 to ``target_url`` (``http://host:port``); see the
    module docstring. Use as a context manager, or call :meth:`close`."""

    def __init__(self, target_url: str, *, seed: int = 0) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rng = random.Random(seed)
        self.counts = FaultCounts()
        #: every request that reached the proxy, in order: (HTTP method, path and query)
        self.log: list[tuple[str, str]] = []
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="aws-fault-proxy")
        self._thread.start()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def inject(self, kind: str, *, times: Optional[int] = 1, probability: float = 1.0,
               operation: Optional[str] = None, method: Optional[str] = None, path: Optional[str] = None,
               body: Optional[bytes] = None, provisioned: bool = False, seed: Optional[str] = None) -> Rule:
        """Add a rule (see :class:`Rule`); it is dropped once it has fired ``times``.
        ``seed``: the rule draws its probability from an RNG of its own, so seeded."""
        if kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}, not {kind!r}")
        rule = Rule(kind, operation, method, path, body, times, probability, provisioned,
                    rng=None if seed is None else random.Random(seed))
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def _pick(self, target: Optional[str], method: str, path: str, body: bytes) -> Optional[Rule]:
        with self._lock:
            self.counts.requests += 1
            for rule in self._rules:
                if not rule.matches(target, method, path, body):
                    continue
                if rule.probability < 1.0 and (rule.rng or self.rng).random() >= rule.probability:
                    continue
                rule.fired += 1
                self.counts.fired[rule.kind] += 1
                if rule.times is not None and rule.fired >= rule.times:
                    self._rules.remove(rule)
                return rule
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.owner.target, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "expect")}
            headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        head = self.command == "HEAD"  # no body, and the length is the object's: keep the server's
        for k, v in headers:
            if k.lower() not in ("transfer-encoding", "connection", "date", "server") and (
                    head or k.lower() != "content-length"):
                self.send_header(k, v)
        if not head:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _fault_answer(self, rule: Rule, dynamo: bool) -> tuple[int, list[tuple[str, str]], bytes]:
        if dynamo:
            status, code, message = _DYNAMO_ERRORS[rule.kind]
            if rule.kind == "throttle" and rule.provisioned:
                code = _PROVISIONED
            return status, [("Content-Type", "application/x-amz-json-1.0"), ("x-amzn-ErrorType", code)], \
                json.dumps({"__type": code, "message": message}).encode()
        status, code, message = _S3_ERRORS[rule.kind]
        return status, [("Content-Type", "application/xml")], (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{message}</Message>'
            f"<RequestId>fault</RequestId></Error>").encode()

    def _handle(self) -> None:
        body = self._body()
        self.owner.log.append((self.command, self.path))
        target = self.headers.get("X-Amz-Target")
        rule = self.owner._pick(target, self.command, self.path, body)
        if rule is not None and rule.kind == "throttle":
            self._answer(*self._fault_answer(rule, target is not None))
            return
        answer = self._forward(body)
        if rule is None:
            self._answer(*answer)
        elif rule.kind == "error":
            self._answer(*self._fault_answer(rule, target is not None))
        else:  # lost: applied, but the client never hears
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
