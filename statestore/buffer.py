"""The write buffer's records (DESIGN.md section 3, seed 004): small writes kept durably
in the state store database until a flush writes them as sorted files.

A write is one :class:`BufferEntry`: the records as Arrow IPC stream bytes, and a
sequence number the store gives it. Sequence numbers of one table increase with each
write but need not be dense, and two concurrent writes may commit in either order, so
a reader never assumes that every number below one it sees is present: a flush names
exactly the entries it read (``StateStore.commit(..., buffer_seqs=...)``), and removes
them in the same atomic step that adds its files, refused when any of them is gone.

``flushes`` counts the flushes committed on a table. A reader that sees the same count
before reading the table's files and after reading the buffer knows that no entry moved
from the buffer to a file in between, so the two together hold every record once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class BufferEntry:
    """One write: ``rows`` records as Arrow IPC stream bytes (``data``; None when the
    reader asked to skip the bytes of this entry), stored at ``written_ms``."""

    seq: int
    rows: int
    written_ms: int
    data: Optional[bytes] = None


@dataclass(frozen=True)
class BufferSnapshot:
    """The entries of a table's buffer at one instant, in sequence order, and how many
    flushes had committed by then."""

    entries: tuple[BufferEntry, ...] = ()
    flushes: int = 0

    @property
    def seqs(self) -> tuple[int, ...]:
        return tuple(e.seq for e in self.entries)

    @property
    def rows(self) -> int:
        return sum(e.rows for e in self.entries)


@dataclass(frozen=True)
class BufferStats:
    """A summary of a table's buffer: entries, records, the oldest entry's write time
    (None when empty), and how many flushes have committed."""

    entries: int = 0
    rows: int = 0
    oldest_ms: Optional[int] = None
    flushes: int = 0

    def age_seconds(self, now_ms: int) -> float:
        """How long the oldest entry has waited (0 when empty)."""
        return 0.0 if self.oldest_ms is None else max(0, now_ms - self.oldest_ms) / 1000


def full_message(table_id: str, held: int, rows: int, most: int) -> str:
    """The message of a :class:`~statestore.errors.BufferFullError`."""
    if rows > most:
        return (f"write of {rows} records to table {table_id} refused (nothing stored): more than the buffer's "
                f"maximum of {most} records (sleeper.table.write.buffer.max.records); ingest them instead")
    return (f"buffer full, flush pending: the write buffer of table {table_id} holds {held} records and takes at most "
            f"{most} (sleeper.table.write.buffer.max.records); nothing of this write of {rows} was stored")


@dataclass(frozen=True)
class RecordBlob:
    """An object a backend keeps outside its rows that holds records of a table (a
    DynamoDB buffer entry's bytes in the blob store): its key, when it was written (ms
    since the epoch), its bytes (Arrow IPC stream), and whether a live entry names it
    (``named`` False: a stray left by a flush whose reply was lost, a failed write, or a
    best-effort delete that failed)."""

    key: str
    written_ms: int
    data: bytes
    named: bool
