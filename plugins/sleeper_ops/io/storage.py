"""Object storage through ``pyarrow.fs``: local paths and ``s3://`` URIs.

Only whole-object put, ranged get, list, head and delete are used (no rename, no
append, no locks). Callers always write under fresh unique names, so an object,
once written, never changes; atomicity comes from the state store alone.
Keys are ``/``-separated and relative to the store's root.
"""

from __future__ import annotations

import builtins
import os
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.fs as pafs

from sleeper_ops.errors import StorageError
from sleeper_ops.io.pandas_free import load_datafusion


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    mtime_ms: int


@dataclass(frozen=True)
class S3Options:
    """How to reach S3 (or an S3-compatible service such as MinIO or moto)."""

    endpoint_override: Optional[str] = None
    scheme: str = "https"
    region: Optional[str] = None
    access_key: Optional[str] = None
    secret_key: Optional[str] = None

    @property
    def endpoint_url(self) -> Optional[str]:
        """The endpoint as a URL with its scheme (``http://127.0.0.1:9000``), or None for AWS."""
        if not self.endpoint_override:
            return None
        if "://" in self.endpoint_override:
            return self.endpoint_override
        return f"{self.scheme}://{self.endpoint_override}"

    def filesystem(self, **extra: Any) -> pafs.S3FileSystem:
        """A pyarrow S3 filesystem with these options (unset ones left to pyarrow's defaults)."""
        kwargs = {k: v for k, v in {"endpoint_override": self.endpoint_override, "scheme": self.scheme,
                                        "region": self.region, "access_key": self.access_key,
                                        "secret_key": self.secret_key}.items() if v}
        return pafs.S3FileSystem(**kwargs, **extra)


class ObjectStore:
    """A root (local directory or ``s3://bucket/prefix``) and the five verbs we use."""

    def __init__(self, uri: str, s3: Optional[S3Options] = None):
        self.uri = uri.rstrip("/")
        self._client: Any = None  # boto3 S3 client for deletes, made on first use; False if boto3 is missing
        self._client_lock = threading.Lock()
        if self.uri.startswith("s3://"):
            # Delayed open: an object smaller than one part is written by a single PUT on close,
            # not a three-request multipart upload.
            self.fs: pafs.FileSystem = (s3 or S3Options()).filesystem(allow_delayed_open=True)
            self.root = self.uri[len("s3://"):]
            self.is_local = False
        else:
            path = os.path.abspath(self.uri)
            os.makedirs(path, exist_ok=True)
            self.fs = pafs.LocalFileSystem()
            self.root = path
            self.is_local = True
        self.s3 = s3

    def path(self, key: str) -> str:
        """The filesystem path of ``key`` (for ``self.fs``)."""
        return f"{self.root}/{key}"

    def uri_of(self, key: str) -> str:
        return f"s3://{self.path(key)}" if not self.is_local else self.path(key)

    @staticmethod
    def fresh_name(suffix: str = "") -> str:
        return f"{uuid.uuid4().hex}{suffix}"

    def _parent(self, key: str) -> None:
        if self.is_local:
            os.makedirs(os.path.dirname(self.path(key)), exist_ok=True)

    def prepare_output(self, key: str) -> None:
        """Make ``key`` writable by another writer (e.g. DataFusion at :meth:`datafusion_paths`):
        on local disk, its directory is created."""
        self._parent(key)

    def open_output(self, key: str) -> pa.NativeFile:
        """A stream writing the whole object ``key`` (created on close for S3)."""
        self._parent(key)
        try:
            return self.fs.open_output_stream(self.path(key))
        except OSError as e:
            raise StorageError(f"cannot write {self.uri_of(key)}: {e}") from e

    def put(self, key: str, data: bytes) -> None:
        try:
            with self.open_output(key) as out:
                out.write(data)
        except StorageError:
            raise
        except OSError as e:  # with delayed open, S3 reports failures on write or close
            raise StorageError(f"cannot write {self.uri_of(key)}: {e}") from e

    def open_input(self, key: str) -> pa.NativeFile:
        """A random-access reader (ranged gets) of ``key``."""
        try:
            return self.fs.open_input_file(self.path(key))
        except OSError as e:
            raise StorageError(f"cannot read {self.uri_of(key)}: {e}") from e

    def get(self, key: str) -> bytes:
        with self.open_input(key) as f:
            return f.read()

    def head(self, key: str) -> Optional[ObjectInfo]:
        info = self.fs.get_file_info(self.path(key))
        if info.type != pafs.FileType.File:
            return None
        return ObjectInfo(key, info.size or 0, int(info.mtime.timestamp() * 1000) if info.mtime else 0)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object whose key starts with the directory ``prefix``."""
        sel = pafs.FileSelector(self.path(prefix.rstrip("/")), recursive=True, allow_not_found=True)
        n = len(self.root) + 1
        for info in self.fs.get_file_info(sel):
            if info.type == pafs.FileType.File:
                yield ObjectInfo(info.path[n:], info.size or 0,
                                 int(info.mtime.timestamp() * 1000) if info.mtime else 0)

    def move(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``, replacing ``dst``: a rename on local disk; on S3 a
        copy (CopyObject: an object up to 5 GB) then a delete of ``src``."""
        self._parent(dst)
        try:
            self.fs.move(self.path(src), self.path(dst))
        except OSError as e:
            raise StorageError(f"cannot move {self.uri_of(src)} to {self.uri_of(dst)}: {e}") from e

    def delete(self, key: str) -> None:
        """Delete ``key``; deleting a missing object is not an error."""
        if not self.is_local:
            client = self._s3_client()
            if client is not None:
                self._delete_s3(client, key)
                return
        try:
            # On S3, pyarrow then PUTs an empty "directory" marker for the parent (one per
            # delete, never removed); the boto3 path above avoids that when boto3 is installed.
            self.fs.delete_file(self.path(key))
        except FileNotFoundError:
            pass
        except OSError as e:
            if "not found" in str(e).lower() or "does not exist" in str(e).lower():
                return
            raise StorageError(f"cannot delete {self.uri_of(key)}: {e}") from e

    def datafusion_paths(self, keys: builtins.list[str]) -> tuple[builtins.list[str], Any, Optional[str]]:
        """``(paths, object_store, store_url)`` for DataFusion to read ``keys``: local
        paths and no store, or ``s3://bucket/...`` URLs with an ``AmazonS3`` store
        carrying this store's endpoint and credentials (else the AWS environment)."""
        if self.is_local:
            return [self.path(k) for k in keys], None, None
        load_datafusion()
        from datafusion.object_store import AmazonS3

        o = self.s3 or S3Options()
        bucket = self.root.split("/", 1)[0]
        endpoint = o.endpoint_url
        store = AmazonS3(bucket_name=bucket, region=o.region or os.environ.get("AWS_REGION") or "us-east-1",
                         access_key_id=o.access_key or os.environ.get("AWS_ACCESS_KEY_ID"),
                         secret_access_key=o.secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY"),
                         endpoint=endpoint, allow_http=bool(endpoint and endpoint.startswith("http://")))
        return [f"s3://{self.path(k)}" for k in keys], store, f"s3://{bucket}"

    def _s3_client(self) -> Any:
        """A boto3 S3 client with this store's settings, or None if boto3 is not installed."""
        with self._client_lock:
            if self._client is None:
                try:
                    import boto3
                except ImportError:
                    self._client = False
                else:
                    o = self.s3 or S3Options()
                    self._client = boto3.session.Session().client(
                        "s3", endpoint_url=o.endpoint_url, region_name=o.region, aws_access_key_id=o.access_key,
                        aws_secret_access_key=o.secret_key)
            return self._client or None

    def _delete_s3(self, client: Any, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, _, object_key = self.path(key).partition("/")
        try:
            client.delete_object(Bucket=bucket, Key=object_key)  # a missing key is not an error in S3
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return
            raise StorageError(f"cannot delete {self.uri_of(key)}: {e}") from e
        except BotoCoreError as e:
            raise StorageError(f"cannot delete {self.uri_of(key)}: {e}") from e
