"""A raw scan of every byte a Sleeper home stores, for the erasure oracle (issue 33,
DESIGN.md section 12): given the places a home keeps things, it finds every occurrence
of a set of needle keys and says where each one is.

It is written WITHOUT the product's code (no ``sleeper_ops``, no ``statestore``): it
knows formats, not the product's layout, so a copy the product forgets about is found
all the same. Places:

* local directories (the object store, the DynamoDB store's blob store, export
  destinations) and S3 buckets/prefixes: every object, whatever its name;
* a PostgreSQL database: every table of every schema but the server's own
  (``pg_catalog``, ``information_schema``, ``pg_toast``), every row, every column;
* DynamoDB tables whose names start with a prefix: every item, every attribute.

Every byte string is searched raw first -- so nothing is "clean" by being undecodable --
and then decoded where it is a known format, the decoded form searched (and decoded
again, a few levels deep): Parquet (every column of every row group, each value), Arrow
IPC streams and files, zlib, gzip and zstd frames, JSON (every string in it, and strings
that are base64 of bytes, such as the sketch sidecars' serialised sketches, which are
then searched raw). Anything else is searched raw only. A needle is searched in its UTF-8
bytes, its JSON-escaped form, its lower-case hex (``bytea`` as text) and its base64 forms
at each alignment (bytes keys in JSON): :mod:`tests.oracle.formats`.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import pyarrow as pa

from tests.oracle.formats import Needles, arrow_tables, as_json, decompress, flatten

#: how many decodings deep a payload is followed (zlib inside JSON inside zstd ...)
MAX_DEPTH = 8
#: schemas of the PostgreSQL server itself, never the product's
PG_SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")
_BASE64_TEXT = re.compile(r"^[A-Za-z0-9+/_-]{16,}={0,2}$")


@dataclass(frozen=True)
class S3Place:
    """Objects under ``s3://bucket/prefix`` at ``endpoint_url`` (prefix "" : the whole bucket)."""

    bucket: str
    prefix: str = ""
    endpoint_url: Optional[str] = None
    region: str = "us-east-1"
    access_key: Optional[str] = None
    secret_key: Optional[str] = None


@dataclass(frozen=True)
class DynamoPlace:
    """Every DynamoDB table whose name starts with ``table_prefix`` at ``endpoint_url``."""

    table_prefix: str
    endpoint_url: Optional[str] = None
    region: str = "us-east-1"
    access_key: Optional[str] = None
    secret_key: Optional[str] = None


@dataclass(frozen=True)
class Places:
    """Everything a home stores: directories, S3 prefixes, a PostgreSQL DSN, DynamoDB tables."""

    directories: Sequence[Path | str] = ()
    s3: Sequence[S3Place] = ()
    postgres_dsn: Optional[str] = None
    dynamodb: Sequence[DynamoPlace] = ()


@dataclass(frozen=True)
class Hit:
    """``needle`` occurs in ``where`` (``file:<relative path>``, ``s3://bucket/key``,
    ``postgres:<schema>.<table>[<row>].<column>``, ``dynamodb:<table>{<key>}.<attribute>``),
    found as ``how`` (``raw``, ``zlib>json``, ``parquet[rg 0].key``, ...)."""

    needle: str
    where: str
    how: str

    def __str__(self) -> str:
        return f"{self.needle!r} in {self.where} ({self.how})"


@dataclass
class ScanResult:
    """Every hit, and how much was scanned."""

    hits: list[Hit] = field(default_factory=list)
    objects: int = 0
    rows: int = 0
    items: int = 0
    decoded: int = 0
    raw_only: int = 0

    def found(self, needle: str) -> list[Hit]:
        return [h for h in self.hits if h.needle == needle]

    def places(self) -> dict[str, set[str]]:
        """needle -> every place holding it."""
        out: dict[str, set[str]] = {}
        for h in self.hits:
            out.setdefault(h.needle, set()).add(h.where)
        return out

    def summary(self) -> str:
        return (f"raw scan: {self.objects} objects, {self.rows} PostgreSQL rows, {self.items} DynamoDB items "
                f"({self.decoded} decoded, {self.raw_only} searched raw only): {len(self.places())} needles found "
                f"in {len({h.where for h in self.hits})} places")

    def render(self, limit: int = 40) -> str:
        lines = [self.summary()]
        seen: set[tuple[str, str]] = set()
        for h in self.hits:
            if (h.needle, h.where) not in seen:
                seen.add((h.needle, h.where))
                lines.append(f"  {h}")
        if len(lines) > limit + 1:
            lines = [*lines[:limit + 1], f"  ... {len(lines) - limit - 1} more"]
        return "\n".join(lines)


class Scanner:
    """Searches byte strings, decoded as deep as :data:`MAX_DEPTH`, for the needles."""

    def __init__(self, needles: Iterable[str | bytes]) -> None:
        self.needles = Needles(needles)
        self.result = ScanResult()

    def _hit(self, found: Iterable[str], where: str, how: str) -> None:
        for n in sorted(found):
            self.result.hits.append(Hit(n, where, how))

    def scan_bytes(self, data: bytes, where: str, how: str = "", depth: int = 0) -> bool:
        """Search ``data`` raw and decoded; returns whether any decoder understood it.
        ``how``: the decodings that led here (hits are labelled with it, and ``raw`` at
        the top)."""
        self._hit(self.needles.search(data), where, how or "raw")
        if depth >= MAX_DEPTH or not data:
            return False

        def then(kind: str) -> str:
            return f"{how}>{kind}" if how else kind

        inner = decompress(data)
        if inner is not None:
            self.scan_bytes(inner[1], where, then(inner[0]), depth + 1)
            return True
        tables = arrow_tables(data)
        if tables is not None:
            kind, parts = tables
            for label, table in parts:
                self._scan_table(table, where, then(kind), label, depth)
            return True
        text = as_json(data)
        if text is not None:
            self._scan_json(text, where, then("json"), depth)
            return True
        return False

    def _scan_table(self, table: pa.Table, where: str, how: str, label: str, depth: int) -> None:
        for name in table.column_names:
            col = table.column(name)
            at = f"{how}[{label}].{name}" if label else f"{how}.{name}"
            for value in flatten(col.to_pylist()):
                self.scan_value(value, where, at, depth + 1)

    def _scan_json(self, doc: Any, where: str, how: str, depth: int) -> None:
        for leaf in flatten(doc):
            self.scan_value(leaf, where, how, depth + 1)

    def scan_value(self, value: Any, where: str, how: str, depth: int = 0) -> None:
        """A decoded value: bytes are scanned as bytes, strings searched and, when they
        are JSON or base64, decoded; anything else searched as its text."""
        if value is None or isinstance(value, (bool, int, float)):
            return
        if isinstance(value, (bytes, bytearray, memoryview)):
            self.scan_bytes(bytes(value), where, how, depth)
            return
        if isinstance(value, (dict, list, tuple)):
            self._scan_json(value, where, how, depth)
            return
        text = str(value)
        self._hit(self.needles.search_text(text), where, how)
        if depth >= MAX_DEPTH:
            return
        stripped = text.strip()
        if stripped[:1] in ("{", "[") and len(stripped) > 1:
            try:
                self._scan_json(json.loads(stripped), where, f"{how}>json", depth)
            except ValueError:
                pass
        elif _BASE64_TEXT.match(stripped):
            try:
                raw = base64.b64decode(stripped + "=" * (-len(stripped) % 4), altchars=b"-_"
                                       if ("-" in stripped or "_" in stripped) else None, validate=True)
            except (binascii.Error, ValueError):
                return
            self.scan_bytes(raw, where, f"{how}>base64", depth + 1)
        elif stripped.startswith("\\x") and len(stripped) > 2:  # bytea as text
            try:
                self.scan_bytes(bytes.fromhex(stripped[2:]), where, f"{how}>hex", depth + 1)
            except ValueError:
                pass

    # ----- places ---------------------------------------------------------------------
    def scan_object(self, data: bytes, where: str) -> None:
        self.result.objects += 1
        if self.scan_bytes(data, where):
            self.result.decoded += 1
        else:
            self.result.raw_only += 1

    def scan_directory(self, root: Path | str) -> None:
        base = Path(root)
        for dirpath, _, files in os.walk(base):
            for name in files:
                path = Path(dirpath) / name
                try:
                    data = path.read_bytes()
                except OSError:
                    continue  # removed while walking
                self.scan_object(data, f"file:{path.relative_to(base.parent)}")

    def scan_s3(self, place: S3Place) -> None:
        import boto3

        s3 = boto3.client("s3", endpoint_url=place.endpoint_url, region_name=place.region,
                          aws_access_key_id=place.access_key, aws_secret_access_key=place.secret_key)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=place.bucket, Prefix=place.prefix):
            for obj in page.get("Contents", []):
                data = s3.get_object(Bucket=place.bucket, Key=obj["Key"])["Body"].read()
                self.scan_object(data, f"s3://{place.bucket}/{obj['Key']}")

    def scan_postgres(self, dsn: str) -> None:
        """Every row of every table outside the server's own schemas: the row as text
        (bytea as hex) searched, then each column value decoded (bytea as bytes)."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(dsn, autocommit=True) as conn:
            tables = conn.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_schema <> ALL(%s) ORDER BY 1, 2", [list(PG_SYSTEM_SCHEMAS)]).fetchall()
            for schema, name in tables:
                ident = sql.Identifier(schema, name)
                cur = conn.execute(sql.SQL("SELECT t::text, t.* FROM {} t").format(ident))
                columns = [d.name for d in (cur.description or [])][1:]
                for i, row in enumerate(cur):
                    self.result.rows += 1
                    where = f"postgres:{schema}.{name}[{i}]"
                    self._hit(self.needles.search_text(row[0]), where, "row as text")
                    for col, value in zip(columns, row[1:]):
                        if isinstance(value, (bytes, memoryview)):
                            self.scan_bytes(bytes(value), f"{where}.{col}", "bytea")
                        elif isinstance(value, (dict, list)):
                            self._scan_json(value, f"{where}.{col}", "json", 0)
                        elif value is not None:
                            self.scan_value(value, f"{where}.{col}", "text")

    def scan_dynamodb(self, place: DynamoPlace) -> None:
        """Every item of every table under the prefix (strongly consistent scans)."""
        import boto3

        ddb = boto3.client("dynamodb", endpoint_url=place.endpoint_url, region_name=place.region,
                           aws_access_key_id=place.access_key, aws_secret_access_key=place.secret_key)
        names = [n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]
                 if n.startswith(place.table_prefix)]
        for name in names:
            keys = [k["AttributeName"] for k in ddb.describe_table(TableName=name)["Table"]["KeySchema"]]
            for page in ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True):
                for item in page["Items"]:
                    self.result.items += 1
                    ident = ",".join(f"{k}={_plain(item.get(k))}" for k in keys)
                    where = f"dynamodb:{name}{{{ident}}}"
                    for attr, value in item.items():
                        self._scan_attribute(value, f"{where}.{attr}")

    def _scan_attribute(self, value: dict[str, Any], where: str) -> None:
        (kind, v), = value.items()
        if kind == "B":
            self.scan_bytes(bytes(v), where, "binary")
        elif kind == "BS":
            for b in v:
                self.scan_bytes(bytes(b), where, "binary set")
        elif kind in ("S", "N"):
            self.scan_value(v, where, "string")
        elif kind in ("SS", "NS"):
            for s in v:
                self.scan_value(s, where, "string set")
        elif kind == "L":
            for i, x in enumerate(v):
                self._scan_attribute(x, f"{where}[{i}]")
        elif kind == "M":
            for k, x in v.items():
                self._hit(self.needles.search_text(k), where, "map key")
                self._scan_attribute(x, f"{where}.{k}")


def _plain(value: Optional[dict[str, Any]]) -> str:
    if not value:
        return "?"
    (kind, v), = value.items()
    return v.hex()[:16] if kind == "B" else str(v)


def raw_scan(places: Places, needles: Iterable[str | bytes]) -> ScanResult:
    """Scan every place of ``places`` for ``needles``; see the module docstring."""
    scanner = Scanner(needles)
    for d in places.directories:
        if Path(d).exists():
            scanner.scan_directory(d)
    for s3 in places.s3:
        scanner.scan_s3(s3)
    if places.postgres_dsn:
        scanner.scan_postgres(places.postgres_dsn)
    for ddb in places.dynamodb:
        scanner.scan_dynamodb(ddb)
    return scanner.result
