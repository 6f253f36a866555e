"""Where the DynamoDB state store keeps what does not fit in an item: transaction
bodies over the inline limit and snapshots of table state.

:func:`open_blob_store` takes ``s3://bucket/prefix`` (S3 through boto3, with its own
endpoint and credentials) or a local directory. Objects are written once under fresh
keys and never changed, so readers need no locking.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

import boto3
import botocore.exceptions
from botocore.config import Config

from statestore.errors import StateStoreUnavailableError


def table_blob_prefixes(table_id: str) -> tuple[str, ...]:
    """The prefixes under which the DynamoDB store keeps a table's blobs: buffered
    writes' bytes, transaction bodies, snapshots and job records (what names each:
    :mod:`statestore.dynamodb.blob_sweep`)."""
    return f"{table_id}/buffer/", f"transactions/{table_id}/", f"snapshots/{table_id}/", f"jobs/{table_id}/"


class BlobStore(Protocol):
    """Immutable objects by key ('/'-separated, relative)."""

    def put(self, key: str, data: bytes) -> None: ...

    def get(self, key: str) -> bytes: ...

    def delete(self, keys: Sequence[str]) -> None: ...

    def list(self, prefix: str) -> list[tuple[str, int]]:
        """Every whole object whose key starts with ``prefix``, as (key, when it was
        last written in ms since the epoch), in key order."""
        ...

    def describe(self) -> str: ...


class LocalBlobStore:
    """Objects as files under ``root`` (written to a temporary name, then renamed)."""

    def __init__(self, root: os.PathLike[str] | str) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key

    def put(self, key: str, data: bytes) -> None:
        p = self._path(key)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        except OSError as e:
            raise StateStoreUnavailableError(f"cannot write {p}: {e}") from e

    def get(self, key: str) -> bytes:
        p = self._path(key)
        try:
            return p.read_bytes()
        except OSError as e:
            raise StateStoreUnavailableError(f"cannot read {p}: {e}") from e

    def delete(self, keys: Sequence[str]) -> None:
        for k in keys:
            self._path(k).unlink(missing_ok=True)

    def list(self, prefix: str) -> list[tuple[str, int]]:
        out = []
        for p in self.root.rglob("*"):
            if p.name.startswith(".tmp-"):
                continue  # a put under way (renamed into place when whole)
            key = p.relative_to(self.root).as_posix()
            if not key.startswith(prefix):
                continue
            try:
                if p.is_file():
                    out.append((key, int(p.stat().st_mtime * 1000)))
            except OSError:
                continue  # deleted meanwhile
        return sorted(out)

    def describe(self) -> str:
        return str(self.root)


class S3BlobStore:
    """Objects under ``s3://bucket/prefix``."""

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: Optional[str] = None,
                 region: Optional[str] = None, access_key: Optional[str] = None,
                 secret_key: Optional[str] = None) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.client: Any = boto3.client(
            "s3", endpoint_url=endpoint_url, region_name=region, aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(retries={"max_attempts": 4, "mode": "standard"}, max_pool_connections=32))

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise StateStoreUnavailableError(f"cannot write s3://{self.bucket}/{self._key(key)}: {e}") from e

    def get(self, key: str) -> bytes:
        try:
            data: bytes = self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
            return data
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise StateStoreUnavailableError(f"cannot read s3://{self.bucket}/{self._key(key)}: {e}") from e

    def delete(self, keys: Sequence[str]) -> None:
        for i in range(0, len(keys), 1000):
            objects = [{"Key": self._key(k)} for k in keys[i:i + 1000]]
            try:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
                raise StateStoreUnavailableError(f"cannot delete from s3://{self.bucket}/{self.prefix}: {e}") from e

    def list(self, prefix: str) -> list[tuple[str, int]]:
        full = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        out = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                for o in page.get("Contents", []):
                    out.append((o["Key"][strip:], int(o["LastModified"].timestamp() * 1000)))
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError) as e:
            raise StateStoreUnavailableError(f"cannot list s3://{self.bucket}/{full}: {e}") from e
        return sorted(out)

    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def open_blob_store(location: str | os.PathLike[str], **s3_options: Any) -> BlobStore:
    """``s3://bucket/prefix`` (``s3_options``: endpoint_url, region, access_key,
    secret_key) or a local directory."""
    loc = str(location)
    if loc.startswith("s3://"):
        bucket, _, prefix = loc[len("s3://"):].partition("/")
        if not bucket:
            raise StateStoreUnavailableError(f"no bucket in {loc!r}")
        return S3BlobStore(bucket, prefix, **s3_options)
    if "://" in loc:
        raise StateStoreUnavailableError(f"the state store's object store must be s3://... or a local path, "
                                         f"not {loc!r}")
    return LocalBlobStore(loc)
