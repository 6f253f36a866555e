"""The ``store`` fixture: every backend behind the one StateStore interface.

DynamoDB runs against one moto server per test session (on 127.0.0.1, started only
when a test asks for it); each test gets tables of its own under a fresh prefix and
a fresh local directory for snapshots and large transactions.

The moto server answers one request at a time (:func:`serial_moto_server`): moto's
TransactWriteItems is not safe under concurrent requests -- it backs up every table a
transaction names and restores the backup when the transaction is cancelled, wiping
the writes other requests made meanwhile -- so a threaded server loses commits that
DynamoDB would keep when committers race.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from statestore import InMemoryStateStore, StateStore

BACKENDS = ["memory", pytest.param("postgres", marks=pytest.mark.integration),
            pytest.param("dynamodb", marks=pytest.mark.integration)]

#: credentials moto accepts (any will do)
MOTO_CREDENTIALS = {"access_key": "test", "secret_key": "test", "region": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def serial_moto_server() -> Iterator[str]:
    """A moto server (DynamoDB and S3) on 127.0.0.1 in a thread of this process, serving
    one request at a time (see the module docstring); yields ``http://127.0.0.1:PORT``."""
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class SerialMotoServer(moto_server.ThreadedMotoServer):  # type: ignore[misc,name-defined]
        def _server_entry(self) -> None:
            app = DomainDispatcherApplication(create_backend_app)
            self._server = make_server(self._ip_address, self._port, app, False, request_handler=MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    port = _free_port()
    server = SerialMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def moto_with_bucket(bucket: str) -> Iterator[str]:
    """:func:`serial_moto_server` with the S3 bucket ``bucket`` made; yields
    ``http://127.0.0.1:PORT``."""
    boto3 = pytest.importorskip("boto3")
    with serial_moto_server() as url:
        boto3.client("s3", endpoint_url=url, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        yield url


@pytest.fixture(scope="session")
def moto_endpoint_url() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a moto server (DynamoDB and S3) for the session."""
    with pytest.MonkeyPatch.context() as mp, serial_moto_server() as url:
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        yield url


def dynamodb_options(endpoint_url: str, blob_dir: Path | str) -> dict[str, Any]:
    """Keyword arguments of ``open_state_store("dynamodb", ...)`` for tables of their own."""
    return {"endpoint_url": endpoint_url, "table_prefix": f"t{uuid.uuid4().hex[:12]}-",
            "object_store": os.fspath(blob_dir), **MOTO_CREDENTIALS}


def open_backend(request: pytest.FixtureRequest, kind: str) -> StateStore:
    if kind == "memory":
        return InMemoryStateStore()
    if kind == "dynamodb":
        from statestore.dynamodb import open_dynamodb

        blobs = request.getfixturevalue("tmp_path") / "statestore-blobs"
        return open_dynamodb(**dynamodb_options(request.getfixturevalue("moto_endpoint_url"), blobs))
    from statestore.postgres import PostgresStateStore

    return PostgresStateStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[StateStore]:
    """A fresh, empty state store of each backend in turn."""
    s = open_backend(request, request.param)
    yield s
    s.close()
