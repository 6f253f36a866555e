"""What a table-commits role may answer from its whole state (:meth:`load_state`), for a
backend with no cheaper way: :class:`StateReads`, whose defaults
:class:`~statestore.store.StateStore` inherits too."""

from __future__ import annotations

from typing import Optional

from statestore.deletes import Tombstone
from statestore.files import FileReference, FileStatus
from statestore.overview import DEFAULT_FILE_SAMPLE, TableOverview, overview_of
from statestore.partitions import Partition
from statestore.retry import COMMIT_RETRIES
from statestore.state import TableState


def file_page_of(state: TableState, after: Optional[str], limit: int) -> list[FileStatus]:
    """The tracked files of ``state`` named after ``after`` (None: from the first), by
    name, at most ``limit``, each with all its references."""
    names = sorted(n for n in state.files if after is None or n > after)[:max(0, limit)]
    return [FileStatus(n, state.files[n].update_time,
                       tuple(state.references[(n, p)] for p in sorted(state.refs_by_file.get(n, ()))))
            for n in names]


def tombstones_of(state: TableState) -> tuple[int, tuple[Tombstone, ...]]:
    """The delete count of ``state`` and its live tombstones, by number."""
    return state.delete_count, tuple(sorted(state.tombstones.values(), key=lambda t: t.number))


class StateReads:
    """The reads of :class:`~statestore.roles.TableCommits` answered from
    :meth:`load_state` (a consistent snapshot, so each answer is too), and the
    process-wide commit retry count. A backend role overrides what it can read cheaper."""

    def load_state(self, table_id: str) -> TableState:
        raise NotImplementedError

    def partitions(self, table_id: str) -> list[Partition]:
        return list(self.load_state(table_id).partitions.values())

    def file_references(self, table_id: str) -> list[FileReference]:
        return list(self.load_state(table_id).references.values())

    def file_statuses(self, table_id: str) -> list[FileStatus]:
        return self.load_state(table_id).file_statuses()

    def file_page(self, table_id: str, *, after: Optional[str] = None, limit: int = 1000) -> list[FileStatus]:
        """The tracked files named after ``after`` (None: from the first), by name, at
        most ``limit``, each with all its references: one page of :meth:`file_statuses`.
        A backend overrides this to read only the page."""
        return file_page_of(self.load_state(table_id), after, limit)

    def overview(self, table_id: str, *, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
        """The table's partitions with reference and record counts, its totals and its
        first ``file_limit`` files by name (:mod:`statestore.overview`). A backend
        overrides this to compute it without loading the whole state."""
        return overview_of(self.load_state(table_id), file_limit)

    def tombstones(self, table_id: str) -> tuple[int, tuple[Tombstone, ...]]:
        """The table's delete count and live tombstones, read together
        (:mod:`statestore.deletes`). A backend overrides this to read only them."""
        return tombstones_of(self.load_state(table_id))

    def sweep_blobs(self, table_id: str, *, older_than_ms: int, dry_run: bool = False) -> list[str]:
        """Delete the objects the backend keeps outside its rows for the table (large
        bodies, buffered bytes, snapshots) that none of its rows names and that were
        written before ``older_than_ms`` (an object is written before the row naming it,
        so a younger one may belong to a write under way); returns their keys (with
        ``dry_run``, the keys it would delete). Left by a write whose outcome was
        unknown or a delete that failed. A backend that keeps nothing outside its rows
        has nothing to sweep."""
        return []

    def commit_retries(self, table_id: str) -> int:
        """How many times a commit to the table was tried again in this process since it
        started (conflicts, serialization failures, lost replies): a process-level count
        (:data:`statestore.retry.COMMIT_RETRIES`), shared by every store of the process."""
        return COMMIT_RETRIES.get(table_id)
