"""Transactions on tombstones (:mod:`statestore.deletes`): delete records, and forget
tombstones once nothing they cover can hold their rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Optional

from statestore.clock import now_ms
from statestore.deletes import Tombstone
from statestore.errors import TransactionError
from statestore.region import Region
from statestore.state import TableState
from statestore.transactions.base import Touches, Transaction


@dataclass(frozen=True)
class DeleteRecords(Transaction):
    """Delete the records in ``regions`` (matching ``where``, when given) committed
    before this transaction: it adds tombstone number ``delete_count + 1``, covering
    every file whose horizon is below it and every buffer entry numbered at most
    ``buffer_seq``. Refused when no region is given or a region is empty."""

    TYPE: ClassVar[str] = "delete_records"
    regions: tuple[Region, ...]
    where: Optional[str] = None
    buffer_seq: int = 0
    update_time: int = field(default_factory=now_ms)

    def touches(self) -> Touches:
        return Touches(tombstones=True)

    def validate(self, state: TableState) -> None:
        if not self.regions:
            raise TransactionError("delete records: no key range given")
        for region in self.regions:
            for r in region.ranges:
                if r.max is not None and not r.min < r.max:
                    raise TransactionError(f"delete records: the range [{r.min!r}, {r.max!r}) of {r.field} is empty")

    def number_in(self, state: TableState) -> int:
        return state.delete_count + 1

    def apply(self, state: TableState) -> None:
        state.delete_count += 1
        n = state.delete_count
        state.tombstones[n] = Tombstone(n, self.regions, self.where, self.buffer_seq, self.update_time)


@dataclass(frozen=True)
class DropTombstones(Transaction):
    """Forget tombstones that no longer cover any row (compaction purged them and no
    covered buffer entry is left). The delete count stays. Refused if any is unknown."""

    TYPE: ClassVar[str] = "drop_tombstones"
    numbers: tuple[int, ...]

    def touches(self) -> Touches:
        return Touches(tombstones=True)

    def validate(self, state: TableState) -> None:
        for n in self.numbers:
            if n not in state.tombstones:
                raise TransactionError(f"drop tombstones: tombstone {n} does not exist")

    def apply(self, state: TableState) -> None:
        for n in self.numbers:
            state.tombstones.pop(n, None)
