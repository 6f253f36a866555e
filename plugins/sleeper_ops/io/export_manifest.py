"""The manifest of a bulk export: ``_manifest.json``, the commit point of an export.

An export (:mod:`sleeper_ops.query.export`) writes one Parquet file per leaf partition
into its destination (a directory or an ``s3://`` prefix), each under an attempt-unique
name (:func:`sleeper_ops.io.attempts.attempt_key`: ``part-00003-<leaf>.attempt-<tag>.parquet``),
and writes the manifest last. So:

* **A destination holds an export iff it holds a manifest that parses.** The files of
  an export are exactly those its manifest names; anything else in the destination
  (files of an attempt that crashed before its manifest) is not part of it.
* **A crash before the manifest leaves no export**; a rerun (same export key or not)
  writes files under names of its own and commits its own manifest. A manifest cut
  short by a crash while being written (possible on a local disk; an S3 PUT is whole
  or absent) does not parse and counts as absent.
* **Idempotent per export key**: a manifest records the key it was made under; a rerun
  of the same key finds it and writes nothing; a different key is refused (the
  destination holds another export).

Manifest fields: ``format``, ``table``, ``table_id``, ``export_key``, ``transaction``
(the state-store transaction number the export read at: every commit up to it, none
after, :meth:`statestore.store.StateStore.transaction_number`), ``made_ms``,
``region``, ``where``, ``write_buffer`` (whether buffered records were included),
``iterators`` (applied, as described by the table), ``rows`` and ``files`` (each:
``leaf``, ``key``, ``rows``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Optional

from sleeper_ops.io.storage import ObjectStore
from statestore.codec import Record, encode

#: the manifest's name in the destination
MANIFEST = "_manifest.json"
FORMAT = 1


@dataclass(frozen=True)
class ExportedFile(Record):
    """One leaf's file of an export: its key in the destination and its row count."""

    leaf: str
    key: str
    rows: int


@dataclass(frozen=True)
class ExportManifest(Record):
    """What one export wrote (see the module docstring for the fields); written through
    :mod:`statestore.codec`, with ``rows`` (the files' sum) last."""

    table: str
    table_id: str
    export_key: str
    transaction: int
    made_ms: int
    region: list[dict[str, Any]]
    where: Optional[str]
    write_buffer: bool
    iterators: str = ""  # absent from manifests written before iterators were recorded
    files: tuple[ExportedFile, ...] = field(default_factory=tuple)
    format: int = FORMAT

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**encode(self), "rows": self.rows}
        return out


def read_manifest(dest: ObjectStore) -> Optional[ExportManifest]:
    """The export ``dest`` holds, or None when it holds none (no manifest, or one cut
    short by a crash while being written)."""
    if dest.head(MANIFEST) is None:
        return None
    try:
        return ExportManifest.from_dict(json.loads(dest.get(MANIFEST)))
    except (ValueError, KeyError, TypeError):
        return None


def write_manifest(dest: ObjectStore, manifest: ExportManifest) -> None:
    """Commit the export: write its manifest (after every file it names)."""
    dest.put(MANIFEST, json.dumps(manifest.to_dict(), indent=1).encode())
