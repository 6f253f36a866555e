"""No stray blobs (DESIGN.md sections 10 and 12): what a commit leaves in the blob store
once it is known applied, and the sweep of blobs no item names.

A table's blobs live under four prefixes, each blob named by one kind of item:

=========================== ================================================
``<table id>/buffer/``      a write-buffer entry ``b#`` (``blob_key``)
``transactions/<table id>/`` a log item or a pending group-commit request (``body_key``)
``snapshots/<table id>/``   a snapshot pointer (``key``)
``jobs/<table id>/``        a job record ``j#`` or a pending request's job (``record_key``)
=========================== ================================================

Every blob is written before the item that names it, and the writer deletes it when
the store answers a definite no; after an unknown outcome (or when a best-effort delete
fails) it stays behind, named by nothing. :meth:`DynamoBlobSweep.sweep_blobs` deletes
those once they are older than a floor (GC passes its orphan grace: a blob younger than
that may belong to a write still under way, whose item is yet to come). It lists the
blobs first and reads the names after, pending requests before the log and the job
records (a leader moves a request's names from the one to the others in one
transaction), so a blob is never taken for unnamed while its name moves.

:meth:`DynamoBlobSweep.settle_found_applied` is the commit's own clean-up when a retry
finds its commit applied (a lost reply): the flushed entries' blobs go once none of the
entries is buffered (the applied commit removed them), and a body spilled by this call
goes unless the applied log item names it (a try of this call logged it).
"""

from __future__ import annotations

import logging
from typing import Any, Optional, Sequence

from statestore.bookkeeping import Bookkeeping
from statestore.dynamodb.blobs import table_blob_prefixes
from statestore.dynamodb.buffer import DynamoWriteBuffer
from statestore.dynamodb.connection import get_n, get_s, n, s
from statestore.dynamodb.context import DynamoContext
from statestore.dynamodb.log import EncodedTransaction
from statestore.dynamodb.writes import delete_quietly
from statestore.errors import StateStoreUnavailableError

log = logging.getLogger(__name__)


class DynamoBlobSweep:
    """The blob clean-up of :class:`~statestore.dynamodb.table_commits.DynamoCommits` (its
    :meth:`sweep_blobs`, and a commit's clean-up after a lost reply) and the names the
    proof of erasure reads (:meth:`named_blobs`), over the store's one
    :class:`~statestore.dynamodb.context.DynamoContext`; reads the write buffer's
    entries through ``buffer``."""

    def __init__(self, context: DynamoContext, buffer: DynamoWriteBuffer) -> None:
        self.context = context
        self.buffer = buffer

    def sweep_blobs(self, table_id: str, *, older_than_ms: int, dry_run: bool = False) -> list[str]:
        """Delete the table's blobs that no item names and that were written before
        ``older_than_ms``; returns their keys (with ``dry_run``, the keys it would
        delete, deleting nothing). See the module docstring for what names a blob."""
        self.context.require_table_id(table_id)
        old = [k for p in table_blob_prefixes(table_id) for k, at in self.context.blobs.list(p)
               if 0 < at < older_than_ms]
        if not old:
            return []
        named = self.named_blobs(table_id)
        stray = sorted(k for k in old if k not in named)
        if stray and not dry_run:
            self.context.blobs.delete(stray)
        return stray

    def named_blobs(self, table_id: str) -> set[str]:
        """Every blob key an item of the table names (read in the order the module
        docstring gives)."""
        d = self.context.dynamo
        what = f"list the blobs named by table {table_id}"
        out: set[str] = set()
        for it in d.query(what, "requests", "table_id = :t AND begins_with(sk, :p)",
                          {":t": s(table_id), ":p": s("p#")}, projection="body_key, job"):
            out.update(k for k in (get_s(it, "body_key"), get_s(it.get("job", {}).get("M", {}), "record_key")) if k)
        out.update(k for k in (get_s(it, "body_key") for it in d.query(
            what, "log", "table_id = :t", {":t": s(table_id)}, projection="body_key")) if k)
        for prefix, attr in (("b#", "blob_key"), ("j#", "record_key")):
            out.update(k for k in (get_s(it, attr) for it in d.query(
                what, "items", "table_id = :t AND begins_with(sk, :p)", {":t": s(table_id), ":p": s(prefix)},
                projection=attr)) if k)
        out.update(k for k in (get_s(it, "key") for it in d.query(
            what, "snapshots", "table_id = :t", {":t": s(table_id)}, names={"#k": "key"}, projection="#k")) if k)
        return out

    def settle_found_applied(self, table_id: str, books: Bookkeeping, encoded: Optional[EncodedTransaction],
                              flushed: Sequence[str], what: str) -> None:
        """After a retry found the commit applied: delete the flushed entries' blobs
        (``flushed``, read by an earlier try) once none of ``books.buffer_seqs`` is
        buffered, and the body this call spilled unless the applied log item names it.
        Best effort: what is left goes to :meth:`sweep_blobs`."""
        try:
            if flushed and books.buffer_seqs and not self.buffer.entry_items(table_id, books.buffer_seqs, "sk"):
                delete_quietly(self.context.blobs, list(flushed), what)
            if encoded is not None and encoded.blob_key and self.logged_body(table_id, books.commit_id) not in (
                    encoded.blob_key, ""):
                delete_quietly(self.context.blobs, [encoded.blob_key], what)
        except StateStoreUnavailableError as e:
            log.warning("%s: blobs left to the sweep: %s", what, e)

    def logged_body(self, table_id: str, commit_id: str) -> Optional[str]:
        """The body blob the log item of ``commit_id`` names (None: inline), or ""
        when that item is not found (then nothing is known, and nothing deleted)."""
        d = self.context.dynamo
        applied = d.get(f"look up commit {commit_id}", "items", {"table_id": s(table_id), "sk": s(f"c#{commit_id}")})
        number = None if applied is None else get_n(applied, "n")
        if number is None:
            return ""
        item: Optional[dict[str, Any]] = d.get(f"read transaction {number} of table {table_id}", "log",
                                               {"table_id": s(table_id), "n": n(number)})
        return "" if item is None else get_s(item, "body_key")
