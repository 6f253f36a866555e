"""Digests of ingest requests, kept with their idempotency keys
(:mod:`statestore.client_writes`; :mod:`sleeper_ops.ingest.standard` says why these)."""

from __future__ import annotations

import hashlib
from typing import Sequence

import pyarrow as pa

from statestore.client_writes import digest_of


def files_digest(located: Sequence[tuple[str, int]]) -> str:
    """The digest of an ingest of files: each one's name and size, in order."""
    return digest_of("ingest-files", *(f"{name}\0{size}".encode() for name, size in located))


def arrow_digest(table: pa.Table) -> str:
    """The digest of an ingest of an Arrow table: its schema and every batch's bytes."""
    h = hashlib.sha256(table.schema.serialize().to_pybytes())
    for b in table.to_batches():
        h.update(b.serialize())
    return digest_of("ingest-arrow", h.digest())
