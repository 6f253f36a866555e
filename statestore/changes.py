"""Incremental reads of a table's partitions and references, for long-lived readers.

A reader (the query path) keeps a copy of a table's partitions and file references and
brings it up to date before each use with :meth:`StateStore.changes_since
<statestore.store.StateStore.changes_since>`, passing the token of its last read. The
answer, a :class:`TableChanges`, names what changed since that token and carries the
current values of only those rows, so a read of an unchanged table costs one small
round trip, whatever the table's size.

Guarantees every backend gives:

* **Complete.** Applying the changes (:meth:`TableChanges.apply_to`) to a copy that was
  exact as of ``since`` makes it exact as of the new ``token``: every partition and
  every reference of the table then, and nothing else (deleted rows are named in
  ``partition_ids``/``filenames`` and absent from ``partitions``/``references``).
* **Read-your-writes.** The new token covers every commit that returned before the
  call began.
* **Consistent.** The rows come from one consistent view of the table (one snapshot,
  or one log position).
* When the store cannot tell what changed (no token, a token it no longer has history
  for, a change too large to list), the answer is ``full``: the whole state, which
  replaces the copy.

Tokens are opaque to callers, are only meaningful to the store that issued them, and
may be held for as long as the caller likes: an old token costs a full answer, never a
wrong one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from statestore.catalog import TableInfo
from statestore.deletes import Tombstone
from statestore.files import FileReference
from statestore.partitions import Partition
from statestore.state import TableState


@dataclass(frozen=True)
class TableChanges:
    """What changed in a table since a token, and the current values of what changed.

    Attributes:
        table: the table's catalog entry, read with the changes.
        token: pass it as ``since`` next time.
        full: ``partitions`` and ``references`` are the whole state (replace, do not merge).
        partition_ids: partitions that changed (added, updated or deleted); empty if ``full``.
        partitions: the current values of those partitions that still exist.
        filenames: files whose references changed; empty if ``full``.
        references: every current reference of those files.
        tombstones: the table's live tombstones (:mod:`statestore.deletes`), all of
            them; None when the answer does not say (they did not change).
        buffer_mark: the table's write buffer in the same snapshot as the rest, as
            ``(flushes, entries, highest seq)`` (see :func:`buffer_mark`); None when the
            answer does not say. Equal marks mean the same entries: only a flush removes
            an entry, and it counts itself in the same transaction.
    """

    table: TableInfo
    token: Any
    full: bool
    partition_ids: frozenset[str] = frozenset()
    partitions: tuple[Partition, ...] = ()
    filenames: frozenset[str] = frozenset()
    references: tuple[FileReference, ...] = ()
    tombstones: Optional[tuple[Tombstone, ...]] = None
    buffer_mark: Optional[tuple[int, int, int]] = None

    @property
    def unchanged(self) -> bool:
        return not self.full and not self.partition_ids and not self.filenames

    @classmethod
    def whole(cls, table: TableInfo, token: Any, state: TableState) -> TableChanges:
        """A full answer: every partition and reference of ``state``."""
        return cls(table, token, True, partitions=tuple(state.partitions.values()),
                   references=tuple(state.references.values()), tombstones=tuple(state.tombstones.values()))

    @classmethod
    def of_rows(cls, table: TableInfo, token: Any, state: TableState, partition_ids: Iterable[str],
                filenames: Iterable[str]) -> TableChanges:
        """An incremental answer naming ``partition_ids`` and ``filenames`` as changed,
        with their current values taken from ``state`` (the table's state at ``token``)."""
        pids, names = frozenset(partition_ids), frozenset(filenames)
        parts = tuple(state.partitions[p] for p in pids if p in state.partitions)
        refs = tuple(state.references[(f, p)] for f in names for p in state.refs_by_file.get(f, ()))
        return cls(table, token, False, pids, parts, names, refs, tuple(state.tombstones.values()))

    def apply_to(self, state: TableState) -> None:
        """Bring ``state`` (partitions and references only; ``files`` is left alone)
        from the token this answer was asked with up to :attr:`token`."""
        if self.full:
            state.partitions.clear()
            state.clear_references()
        for pid in self.partition_ids:
            state.partitions.pop(pid, None)
        for p in self.partitions:
            state.partitions[p.id] = p
        for name in self.filenames:
            for pid in list(state.refs_by_file.get(name, ())):
                state.remove_reference(name, pid)
        state.put_references(self.references)
        if self.tombstones is not None:
            state.tombstones = {t.number: t for t in self.tombstones}


def is_token_of(token: Any, kind: str) -> Optional[tuple[Any, ...]]:
    """``token`` without its kind tag, if it is a tuple tagged ``kind`` (a token of the
    asking store's backend); else None. Stores tag their tokens so a token of another
    backend, or of another store object, is never misread."""
    if isinstance(token, tuple) and token and token[0] == kind:
        return token[1:]
    return None


def buffer_mark(flushes: int, seqs: Iterable[int]) -> tuple[int, int, int]:
    """The :attr:`TableChanges.buffer_mark` of a write buffer holding the entries ``seqs``
    after ``flushes`` flushes."""
    seqs = list(seqs)
    return flushes, len(seqs), max(seqs, default=0)
