"""What a SQL statement reads of each table, as ``EXPLAIN`` shows it.

:func:`scan_report` describes one table's scan: the key intervals of the first row key
field it reads, the leaf partitions overlapping them out of all leaves, and the file
references and files the table's query runner would read out of all of them (the
totals come from a fresh snapshot of the table's state, so a commit racing the
statement can make them differ by that commit). :func:`explain_rows` appends one
``sleeper_scan`` row per table to DataFusion's ``EXPLAIN`` result, and
:func:`render_explain` prints such a result for people.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pyarrow as pa

from sleeper_ops.query.runner import QueryRunner
from sleeper_ops.query.sql_keys import Interval, everything, regions_of
from statestore.catalog import TableInfo
from statestore.roles import TableCommits

#: Schema metadata key marking an ``EXPLAIN`` result (value ``b"true"``).
EXPLAIN_METADATA = b"sleeper.explain"


@dataclass(frozen=True)
class ScanReport:
    """What one SQL statement reads of one table."""

    table: str
    key_field: str
    intervals: tuple[Interval, ...]  # [lo, hi) of the first row key field; hi None: unbounded
    whole_table: bool
    leaves_read: int
    leaves_total: int
    partitions_read: int  # leaves and ancestors whose references are read
    references_read: int
    references_total: int
    files_read: int
    files_total: int

    def describe(self) -> str:
        """Three lines: the key intervals, the leaves, the files."""
        if self.whole_table:
            keys = f"{self.table}: whole table (no predicate on row key field {self.key_field} prunes)"
        elif not self.intervals:
            keys = f"{self.table}: no {self.key_field} can match: nothing is read"
        else:
            shown = ", ".join(f"[{lo!r}, {'unbounded' if hi is None else repr(hi)})" for lo, hi in self.intervals)
            keys = f"{self.table}: {self.key_field} in {shown}"
        return (f"{keys}\nleaves read: {self.leaves_read} of {self.leaves_total} "
                f"(partitions with references read: {self.partitions_read})\n"
                f"files read: {self.files_read} of {self.files_total} "
                f"(file references: {self.references_read} of {self.references_total})")


def scan_report(state_store: TableCommits, runner: QueryRunner, info: TableInfo,
                intervals: Sequence[Interval]) -> ScanReport:
    """What ``runner`` reads of ``info``'s table for ``intervals``; reads no data file."""
    state = state_store.load_state(info.table_id)
    tree = state.tree()
    regions = regions_of(info.schema, intervals)
    leaves = {p.id for r in regions for p in tree.leaves_overlapping(r)}
    refs = runner.planned_references(regions) if regions else []
    return ScanReport(
        table=info.name, key_field=info.schema.row_key_fields[0].name, intervals=tuple(intervals),
        whole_table=list(intervals) == everything(info.schema),
        leaves_read=len(leaves), leaves_total=len(tree.leaves()),
        partitions_read=len({r.partition_id for r in refs}),
        references_read=len(refs), references_total=len(state.references),
        files_read=len({r.filename for r in refs}),
        files_total=len({filename for filename, _ in state.references}))


def explain_rows(result: pa.Table, reports: Sequence[ScanReport]) -> pa.Table:
    """DataFusion's ``EXPLAIN`` result (``plan_type``, ``plan``) with a ``sleeper_scan``
    row per report appended, marked with :data:`EXPLAIN_METADATA`."""
    extra = pa.table({"plan_type": ["sleeper_scan"] * len(reports), "plan": [r.describe() for r in reports]})
    combined = pa.concat_tables([result.cast(pa.schema([("plan_type", pa.string()), ("plan", pa.string())])),
                                 extra])
    return combined.replace_schema_metadata({EXPLAIN_METADATA: b"true"})


def is_explain(result: Any) -> bool:
    """True for a result :func:`explain_rows` made."""
    md = result.schema.metadata or {}
    return bool(md.get(EXPLAIN_METADATA) == b"true")


def render_explain(result: pa.Table) -> str:
    """An ``EXPLAIN`` result as text: each plan under its type, indented."""
    out = []
    for row in result.to_pylist():
        out.append(f"{row['plan_type']}:")
        out += [f"  {line}" for line in str(row["plan"]).rstrip("\n").splitlines()]
    return "\n".join(out)
