"""File references and file records.

A data file is tracked by one :class:`FileRecord` for as long as it exists, and is
referenced from zero or more partitions by :class:`FileReference` rows. A file with
no references stays tracked until garbage collection deletes it; ``update_time`` of
its record is the last time its set of references changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from statestore.codec import Record, omitted_at_default


@dataclass(frozen=True)
class FileReference(Record):
    """A reference to (part of) a data file from one partition.

    Attributes:
        filename: the object name of the data file.
        partition_id: the partition the reference belongs to.
        record_count: records of the file in this partition (exact unless
            ``count_approximate``).
        count_approximate: the count is an estimate (after a reference was split).
        whole_file: the file holds only records of this partition.
        job_id: the compaction job the reference is assigned to, if any.
        update_time: milliseconds since the epoch of the last change.
        delete_horizon: the table's delete count when the writer of the file started
            reading its input: tombstones numbered above it apply to the file
            (:mod:`statestore.deletes`). Left out of the written form while 0: the
            form of references written before deletes existed.
    """

    CODEC_STRICT = True  # an unknown key is refused, as it always was

    filename: str
    partition_id: str
    record_count: int
    count_approximate: bool = False
    whole_file: bool = True
    job_id: Optional[str] = None
    update_time: int = 0
    delete_horizon: int = field(default=0, metadata=omitted_at_default())


@dataclass(frozen=True)
class FileRecord:
    """A tracked data file. ``update_time`` is when its references last changed (ms)."""

    filename: str
    update_time: int


@dataclass(frozen=True)
class FileStatus:
    """A file with all its references: what reports and garbage collection look at."""

    filename: str
    update_time: int
    references: tuple[FileReference, ...]
