"""What one transaction did to a table (:class:`TransactionSummary`): the record every
backend keeps in a table's history (:mod:`statestore.history`), and that the
:class:`~statestore.roles.History` role returns. Its own module so that the roles, the
StateStore interface and the history module all import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from statestore.codec import Record


@dataclass(frozen=True)
class TransactionSummary(Record):
    """What one transaction did to a table.

    Attributes:
        number: the transaction number (see the module docstring).
        time_ms: when it committed (ms since the epoch, the committer's clock).
        kind: the transaction's type (``add_files``, ``replace_file_references``, ...).
        files_added / records_added: files that had no reference before and have some
            after, and the records of their references.
        files_removed / records_removed: files that had references before and none
            after, and the records those references held. A reference that only moved
            (pushed down to child partitions) counts in neither.
        job_id: the job that made it (its job record, or the compaction job), if any.
        detail: a short note for kinds whose files say little (a delete's ranges, the
            files a GC forgot, a split partition).
    """

    number: int
    time_ms: int
    kind: str
    files_added: int = 0
    files_removed: int = 0
    records_added: int = 0
    records_removed: int = 0
    job_id: Optional[str] = None
    detail: Optional[str] = None
