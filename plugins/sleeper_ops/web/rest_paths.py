"""Which files the REST API may be asked to ingest: only files under the allowed prefixes.

A REST client names files on the server's side (local paths, ``s3://`` URIs) for the
server to read. So that a client cannot make the server read whatever it can reach,
every file must lie under one of the *allowed ingest prefixes*: the configuration's
``ingest.allowed_prefixes`` (``sleeper.toml``), by default the object store's ``ingest``
folder and ``SLEEPER_HOME/ingest`` (:meth:`sleeper_ops.config.SleeperConfig.ingest_prefixes`).
Whatever the prefixes, a file in a table's own area of the object store (its data
files, ``<store>/<table id>/...``) is refused: a writer of one table cannot queue
another table's files into it.

The rules, checked before anything is read or queued:

* a local path must be absolute; it is resolved (``..`` and every symbolic link,
  :func:`os.path.realpath`) and must then lie inside a local prefix, itself resolved
  the same way. The resolved path is what gets queued, so a symbolic link cannot lead
  out of a prefix, and a link changed after the check is not followed again;
* an ``s3://bucket/key`` URI must name a bucket and key of an ``s3://`` prefix, whole
  path segments compared (``s3://b/in`` allows ``s3://b/in/x``, not ``s3://b/inx`` nor
  ``s3://other/in/x``); a key with an empty, ``.`` or ``..`` segment is refused;
* any other URI (``file://``, ``http://``, ``s3a://``, ...) is refused, as is a name
  holding a control character or a lone surrogate.

A refusal is an :class:`IngestPathError` (HTTP 422) naming the rule and each file
refused (as the client gave it) with why; it shows no path of the server's (neither
the prefixes nor where a link leads).
"""

from __future__ import annotations

import os
import re
from typing import Sequence

from sleeper_ops.errors import IngestError

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
RULE = ("the REST API ingests only files under the allowed ingest prefixes (ingest.allowed_prefixes in "
        "sleeper.toml; by default the object store's ingest folder and SLEEPER_HOME/ingest), and never a "
        "table's own data files")
_TABLE_DATA = "a table's own data in the object store: table files are never ingested through the REST API"


class IngestPathError(IngestError):
    """Files outside the allowed ingest prefixes (nothing is queued or read)."""


def _s3_parts(uri: str) -> tuple[str, list[str]]:
    bucket, _, key = uri[len("s3://"):].partition("/")
    return bucket, key.split("/") if key else []


def _under_s3(bucket: str, segments: list[str], prefixes: Sequence[tuple[str, list[str]]]) -> bool:
    return any(bucket == pb and segments[:len(ps)] == ps and len(segments) > len(ps) for pb, ps in prefixes)


def _under_local(real: str, prefixes: Sequence[str]) -> bool:
    return any(real != p and os.path.commonpath([real, p]) == p for p in prefixes)


def _check_one(path: str, local: Sequence[str], s3: Sequence[tuple[str, list[str]]],
               refused_local: Sequence[str] = (), refused_s3: Sequence[tuple[str, list[str]]] = ()) -> str:
    """The location to queue for ``path``; raises ValueError with the reason it is refused."""
    if not path or _CONTROL.search(path):
        raise ValueError("a file name must be non-empty and hold no control characters")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a file name must be valid Unicode (no lone surrogates)") from None
    scheme = _SCHEME.match(path)
    if path.startswith("s3://"):
        bucket, segments = _s3_parts(path)
        if not bucket or not segments or any(s in ("", ".", "..") for s in segments):
            raise ValueError("an s3:// URI must be s3://bucket/key with no empty, '.' or '..' path segment")
        if _under_s3(bucket, segments, refused_s3):
            raise ValueError(_TABLE_DATA)
        if _under_s3(bucket, segments, s3):
            return path
        raise ValueError("not under an allowed s3:// prefix")
    if scheme is not None and len(scheme.group(1)) > 1:  # a one-letter "scheme" would be a drive letter
        raise ValueError(f"{scheme.group(1)}: URIs are not accepted: give an absolute local path or an s3:// URI")
    if not os.path.isabs(path):
        raise ValueError("a local path must be absolute")
    real = os.path.realpath(path)
    if _under_local(real, refused_local):
        raise ValueError(_TABLE_DATA)
    if _under_local(real, local):
        return real
    if real != os.path.normpath(path):
        raise ValueError("leads (through '..' or a symbolic link) outside the allowed prefixes")
    raise ValueError("not under an allowed prefix")


def _split(prefixes: Sequence[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    return ([os.path.realpath(p) for p in prefixes if os.path.isabs(p)],
            [_s3_parts(p.rstrip("/")) for p in prefixes if p.startswith("s3://")])


def check_ingest_paths(files: Sequence[str], prefixes: Sequence[str], table_areas: Sequence[str] = ()) -> list[str]:
    """The locations to queue for ``files`` (local paths resolved, URIs unchanged), in
    order; raises :class:`IngestPathError` naming every file refused, if any is.

    ``prefixes`` are local directories (absolute) and ``s3://bucket[/key]`` URIs; a
    prefix that is neither allows nothing. ``table_areas`` (the same forms) are the
    tables' own areas of the object store: a file under one is refused, whatever the
    prefixes allow.
    """
    local, s3 = _split(prefixes)
    refused_local, refused_s3 = _split(table_areas)
    out, problems = [], []
    for f in files:
        try:
            out.append(_check_one(f, local, s3, refused_local, refused_s3))
        except ValueError as e:
            problems.append(f"{f!r}: {e}")
    if problems:
        raise IngestPathError(f"nothing queued: {RULE}. Refused: {'; '.join(problems)}")
    return out
