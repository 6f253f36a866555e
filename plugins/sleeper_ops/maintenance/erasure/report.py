"""What the proof of erasure found (:mod:`sleeper_ops.maintenance.erasure`): each holder
of matching records with what it is and when it goes, and the report's fine print."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Optional

from statestore.region import Region

#: what the report checks, and what it leaves out (printed under a clean report; ``fine_print`` in JSON)
FINE_PRINT = (
    "checked: every data file the state store tracks (referenced or awaiting GC), every other object under the "
    "table's data prefix and its bulk import scratch runs (orphans, losing Spark attempts, named outputs of "
    "unfinished jobs, sketch sidecars), the write buffer's entries and, on DynamoDB, every blob under its buffer "
    "prefix, every export the table recorded (committed or crashed), and the state store's own records that hold "
    "a delete's keys (live tombstones, transaction bodies and history rows, snapshots, pending commit requests); "
    "not checked: files outside the table that users own (ingest sources, copies they made), and backups of the "
    "state store or the bucket. "
    "An --as-of read of a state from before the delete returns the records until that state leaves the history.")

#: ``HeldObject.kind`` of each place a copy can be
KINDS = ("file", "file awaiting GC", "untracked object", "losing attempt", "output of an unfinished job",
         "scratch run", "sketch sidecar", "buffer entry", "buffer blob", "export file", "crashed export file",
         "state store record")


def iso(ms: int) -> str:
    """``ms`` since the epoch as an ISO 8601 UTC time to the second."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class HeldObject:
    """An object holding ``rows`` matching records, ``hidden`` of them by deletes
    (``rows`` None: it cannot be decoded, so it cannot be told clean, and counts as
    holding some). ``goes``: when and by what it goes (None: when compaction and GC
    purge it, or when its owner removes it); ``goes_ms``: the earliest time it can go,
    when one is known."""

    kind: str
    name: str
    rows: Optional[int]
    hidden: int = 0
    partitions: tuple[str, ...] = ()
    goes: Optional[str] = None
    goes_ms: Optional[int] = None

    @property
    def cannot_tell(self) -> bool:
        return self.rows is None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "rows": self.rows, "cannot_tell": self.cannot_tell,
                "hidden_by_deletes": self.hidden, "partitions": list(self.partitions), "goes": self.goes,
                "goes_ms": self.goes_ms}

    def render(self) -> str:
        where = f" in {', '.join(self.partitions)}" if self.partitions else ""
        if self.rows is None:
            what = "cannot tell (cannot be decoded; counted as holding records)"
        elif self.kind == "state store record":
            what = f"{self.rows} matching delete region{'' if self.rows == 1 else 's'} (keys, not records)"
        elif self.kind == "sketch sidecar":
            what = f"{self.rows} sampled key value{'' if self.rows == 1 else 's'}"
        else:
            what = f"{self.rows} records"
        if self.kind in ("file", "file awaiting GC", "buffer entry"):
            tail = f"({self.hidden} hidden by deletes, awaiting compaction or GC)"
        elif self.kind in ("export file", "crashed export file"):
            tail = "(a copy outside the table: remove it)"
        else:
            tail = f"(goes {self.goes})" if self.goes else ""
        return f"  {self.kind}: {self.name}{where}: {what} {tail}".rstrip()


@dataclass
class ErasureReport:
    """What holds records matching ``regions`` and ``where`` (see
    :mod:`sleeper_ops.maintenance.erasure`); clean once nothing does."""

    table: str
    regions: tuple[Region, ...]
    where: Optional[str]
    held: list[HeldObject] = field(default_factory=list)
    files_checked: int = 0
    files_read: int = 0
    buffer_entries_checked: int = 0
    untracked_checked: int = 0
    blobs_checked: int = 0
    exports_checked: int = 0
    state_records_checked: int = 0

    @property
    def clean(self) -> bool:
        return not self.held

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "regions": [r.to_dict() for r in self.regions], "where": self.where,
                "clean": self.clean, "held": [h.to_dict() for h in self.held],
                "files_checked": self.files_checked, "files_read": self.files_read,
                "buffer_entries_checked": self.buffer_entries_checked, "untracked_checked": self.untracked_checked,
                "blobs_checked": self.blobs_checked, "exports_checked": self.exports_checked,
                "state_records_checked": self.state_records_checked, "fine_print": FINE_PRINT}

    def render(self) -> str:
        head = (f"{self.table}: checked {self.files_checked} files ({self.files_read} read after their statistics), "
                f"{self.untracked_checked} untracked objects, {self.buffer_entries_checked} buffer entries, "
                f"{self.blobs_checked} buffer blobs, {self.exports_checked} exports and "
                f"{self.state_records_checked} state store records")
        if self.clean:
            return f"{head}: nothing holds a matching record or key (erased)\n({FINE_PRINT})"
        lines = [f"{head}: {len(self.held)} still hold matching records or keys:"]
        lines.extend(h.render() for h in self.held)
        return "\n".join(lines)
