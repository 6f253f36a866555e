"""A table's overview: its partition tree with file and record counts, the totals, and
the first files by name -- what pages and reports show, in memory bounded by the
number of partitions and the file sample, not by the number of files.

:func:`overview_of` computes it from a whole :class:`~statestore.state.TableState` (the
definition, and what the in-memory store uses); the PostgreSQL store computes the same
with aggregate queries (``StateStore.overview``), never loading every reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statestore.files import FileStatus
from statestore.partitions import Partition, PartitionTree
from statestore.state import TableState

#: Files an overview lists by default.
DEFAULT_FILE_SAMPLE = 500


@dataclass(frozen=True)
class PartitionCounts:
    """The references on one partition and the records they count."""

    files: int = 0
    records: int = 0
    approximate: bool = False


@dataclass(frozen=True)
class TableOverview:
    """See the module docstring. ``sample`` is the first ``file_limit`` tracked files by
    name, each with all its references."""

    partitions: tuple[Partition, ...]
    counts: dict[str, PartitionCounts] = field(default_factory=dict)
    files: int = 0
    references: int = 0
    unreferenced: int = 0
    sample: tuple[FileStatus, ...] = ()

    @property
    def records(self) -> int:
        return sum(c.records for c in self.counts.values())

    @property
    def records_approximate(self) -> bool:
        """Whether :attr:`records` includes estimated counts (references of a file split
        between partitions count half each side until compaction rewrites them)."""
        return any(c.approximate for c in self.counts.values())

    @property
    def leaves(self) -> int:
        return sum(1 for p in self.partitions if p.is_leaf)

    def tree(self) -> PartitionTree:
        return PartitionTree(self.partitions)

    def count(self, partition_id: str) -> PartitionCounts:
        return self.counts.get(partition_id, PartitionCounts())


def overview_of(state: TableState, file_limit: int = DEFAULT_FILE_SAMPLE) -> TableOverview:
    """The overview of a whole state (the definition the backends' versions must match)."""
    counts: dict[str, PartitionCounts] = {}
    for ref in state.references.values():
        c = counts.get(ref.partition_id, PartitionCounts())
        counts[ref.partition_id] = PartitionCounts(c.files + 1, c.records + ref.record_count,
                                                   c.approximate or ref.count_approximate)
    statuses = state.file_statuses()
    return TableOverview(
        partitions=tuple(sorted(state.partitions.values(), key=lambda p: p.id)), counts=counts,
        files=len(state.files), references=len(state.references),
        unreferenced=sum(1 for f in statuses if not f.references),
        sample=tuple(statuses[:max(0, file_limit)]))
