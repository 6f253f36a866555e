"""The base of every transaction: :class:`Transaction`, :class:`Touches` and the checks
the concrete transactions share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from statestore.clock import now_ms  # noqa: F401  (also imported from here)
from statestore.codec import Record
from statestore.errors import FileReferenceError, PartitionError
from statestore.files import FileRecord, FileReference
from statestore.partitions import Partition
from statestore.state import TableState


@dataclass(frozen=True)
class Touches:
    """The rows a transaction reads or writes: partitions by id, files by name.

    ``whole_table`` asks for the full state (initialising partitions, clearing files).
    Loading a file loads its record and all its references. ``tombstones`` asks for the
    table's tombstones and delete count (:mod:`statestore.deletes`).
    """

    partition_ids: frozenset[str] = frozenset()
    filenames: frozenset[str] = frozenset()
    whole_table: bool = False
    tombstones: bool = False


class Transaction(Record):
    """Base of all transactions. Subclasses are frozen dataclasses with a TYPE tag,
    written (:mod:`statestore.codec`) as ``{"type": TYPE, "update_time": ..., <the other
    fields in declaration order>}``."""

    TYPE: ClassVar[str] = ""
    CODEC_ORDER: ClassVar[tuple[str, ...]] = ("update_time",)
    CODEC_TAG: ClassVar[tuple[str, str]] = ("type", "")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.CODEC_TAG = ("type", cls.TYPE)

    def touches(self) -> Touches:
        raise NotImplementedError

    def validate(self, state: TableState) -> None:
        raise NotImplementedError

    def apply(self, state: TableState) -> None:
        """Apply to ``state``; call only after :meth:`validate` passed."""
        raise NotImplementedError

    def number_in(self, state: TableState) -> int:
        """The number this transaction gives what it creates when applied to ``state``
        (a delete: its tombstone's), else 0: kept with an idempotency key as the first
        answer (:mod:`statestore.client_writes`)."""
        return 0


def require_partition(state: TableState, pid: str) -> Partition:
    p = state.partitions.get(pid)
    if p is None:
        raise PartitionError(f"partition {pid} does not exist")
    return p


def require_reference(state: TableState, filename: str, pid: str) -> FileReference:
    ref = state.references.get((filename, pid))
    if ref is None:
        raise FileReferenceError(f"file {filename} has no reference in partition {pid}")
    return ref


def touch_file(state: TableState, filename: str, when: int) -> None:
    state.files[filename] = FileRecord(filename, when)
