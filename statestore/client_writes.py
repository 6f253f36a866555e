"""Idempotent client writes (DESIGN.md section 10): a write to the buffer or a batch of
ingest requests may carry the client's *idempotency key* (``Idempotency-Key`` in REST,
``--request-id`` in the CLI, ``request_id=`` in the Python API).

The store records the key in the same atomic step as the write itself, with a digest
of what was asked and the answer given (:class:`ClientWriteRecord`). A write whose key
the table already holds stores nothing: with the same digest it gets the first answer
back (the same sequence number, the same ingest request ids), which is how a client
that lost its reply (a timeout, a dropped connection, a 503 whose outcome is unknown)
retries safely; with another digest it is refused with :class:`IdempotencyKeyReusedError`.

Keys are kept at least ``sleeper.table.write.idempotency.hours`` (garbage collection
then forgets them: :meth:`~statestore.store.StateStore.prune_client_writes`); a key
is per table.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from statestore.errors import SleeperError

#: the longest key accepted (it is stored as part of a primary key)
MAX_KEY_LENGTH = 255


class IdempotencyKeyReusedError(SleeperError):
    """A write carried an idempotency key the table already holds for a different
    request: nothing was stored."""


class IdempotencyKeyError(SleeperError):
    """An idempotency key is empty, too long or not printable ASCII."""


@dataclass(frozen=True)
class ClientWrite:
    """A client's key for one write, and the digest of what the write asks
    (:func:`digest_of`). ``answer`` is what a repeat gets back, as text the caller
    chose (ingest requests); a buffer write's answer is its sequence number."""

    request_id: str
    digest: str
    answer: str = ""


@dataclass(frozen=True)
class ClientWriteRecord:
    """A remembered write: its key and digest, the answer it got (``seq`` for a buffer
    write, ``answer`` text otherwise) and when it was stored (ms since the epoch)."""

    request_id: str
    digest: str
    seq: int
    answer: str
    written_ms: int

    def answer_for(self, table_id: str, write: ClientWrite) -> ClientWriteRecord:
        """This record, as the answer to a repeat of ``write``; raises
        :class:`IdempotencyKeyReusedError` when ``write`` asks something else."""
        if write.digest != self.digest:
            raise IdempotencyKeyReusedError(
                f"idempotency key {write.request_id!r} was already used for a different request to table "
                f"{table_id} (nothing stored): a key names one request; send a new request with a new key")
        return self


def check_key(request_id: str) -> str:
    """``request_id`` if it is a usable key: 1 to 255 printable ASCII characters."""
    if not 0 < len(request_id) <= MAX_KEY_LENGTH or not request_id.isascii() or not request_id.isprintable():
        raise IdempotencyKeyError(f"idempotency key {request_id[:40]!r}: a key is 1 to {MAX_KEY_LENGTH} "
                                  "printable ASCII characters")
    return request_id


def digest_of(kind: str, *parts: bytes) -> str:
    """The digest of a request of ``kind`` (``write``, ``ingest-request``) made of
    ``parts``: a key reused for another kind of request, or another body, differs."""
    h = hashlib.sha256(kind.encode())
    for p in parts:
        h.update(len(p).to_bytes(8, "big"))
        h.update(p)
    return h.hexdigest()
