"""Record deletes (issue 22): a delete is a tombstone in the table's state.

A :class:`Tombstone` names key regions (on the row key fields, ``[min, max)`` each) and
an optional SQL predicate on any fields; a record matches when its key is in one of the
regions and the predicate (if any) is true for it.

**Ordering.** Tombstones are numbered 1, 2, ... per table in commit order
(``TableState.delete_count`` is the last number given; it never goes down, even when a
purged tombstone is dropped). Data is stamped with the tombstones it has already seen:

* a file reference carries ``delete_horizon``: the table's ``delete_count`` when the job
  that wrote the file *started reading its input* (an ingest job, a bulk import, a
  flush, a compaction). Tombstone ``n`` applies to a file iff ``horizon < n``. So a
  delete removes the records of files committed before it, and of ingest jobs and bulk
  imports already running when it commits (their files commit later with an older
  horizon); a job that starts after the delete is *written after it* and keeps all its
  records. A flush or compaction applies the tombstones it saw (horizon and older)
  itself, so its output holds none of those rows.
* a write buffer entry is covered iff its sequence number is at most the tombstone's
  ``buffer_seq`` (the buffer's highest sequence number when the delete was made): every
  write that returned before the delete was asked is removed; a write racing the delete
  may go either way.

Readers hide the matching rows of covered data at once; compaction removes them
physically, and a tombstone is dropped (:class:`~statestore.transactions.DropTombstones`)
once no referenced file and no buffer entry it covers can hold matching rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from statestore.codec import Record
from statestore.region import Region


@dataclass(frozen=True)
class Tombstone(Record):
    """Delete ``number`` of a table: the records in ``regions`` (matching ``where``, an
    SQL predicate, when given) of every file whose horizon is below ``number`` and every
    buffer entry numbered at most ``buffer_seq``. ``created_ms``: when it committed."""

    number: int
    regions: tuple[Region, ...]
    where: Optional[str] = None
    buffer_seq: int = 0
    created_ms: int = 0

    def covers_file(self, delete_horizon: int) -> bool:
        return delete_horizon < self.number

    def covers_buffer_entry(self, seq: int) -> bool:
        return seq <= self.buffer_seq


@dataclass(frozen=True)
class KeyRecord:
    """A record of the state store itself that holds a delete's keys (the bounds of its
    regions are key values; ``where`` may name values too): a live tombstone, a
    transaction body or history row, a snapshot of the state.

    Attributes:
        what: what and where it is, for a person (``"tombstone 3"``, ``"history row of
            transaction 1234 (undo of a drop)"``, ``"snapshot 1000"``).
        regions: the delete regions it holds; None when they cannot be read back (a
            row written by an older release that keeps them only as text): it then
            counts as holding any key.
        where: the delete's predicate, if any.
        goes: when it goes, in words (what must happen first).
        goes_ms: the earliest time it can go (ms since the epoch), when one is known.
    """

    what: str
    regions: Optional[tuple[Region, ...]]
    where: Optional[str] = None
    goes: str = ""
    goes_ms: Optional[int] = None

    def holds_any(self, regions: tuple[Region, ...]) -> bool:
        """Whether it holds a key in one of ``regions`` (one of its regions overlaps one)."""
        return self.regions is None or any(a.overlaps(b) for a in self.regions for b in regions)


TOMBSTONE_GOES = ("when garbage collection drops it: once compaction has purged every row it covers "
                  "(after sleeper.table.delete.purge.hours) and no job that started before the delete is unfinished")
