"""Reports on a table: the partition tree, its files and its jobs, as data or text.

A record count is exact unless marked ``~``: a file referenced from a partition that
split has its count estimated on each side until compaction rewrites it,
and any total that includes such an estimate is marked ``~`` too, with a note saying so
(:data:`APPROXIMATE_NOTE`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Optional, Sequence

from statestore.files import FileStatus
from statestore.jobs import JobRecord
from statestore.overview import TableOverview, overview_of
from statestore.region import Region, encode_value
from statestore.state import TableState

#: what a ``~`` after a record count means, said once under a report that shows one
APPROXIMATE_NOTE = ("~: estimated: a file referenced from a partition that split has its records estimated on "
                    "each side until compaction rewrites it")


def approximately(records: int, approximate: bool) -> str:
    """``records`` as a report shows it: ``1,234``, or ``1,234~`` when it includes estimates."""
    return f"{records:,}{'~' if approximate else ''}"


def _fmt(v: Any) -> str:
    if v is None:
        return "∞"
    if isinstance(v, bytes):
        return "0x" + v.hex()
    return repr(v)


def region_text(region: Region) -> str:
    return " ".join(f"{r.field}∈[{_fmt(r.min)}, {_fmt(r.max)})" for r in region.ranges)


def partitions_report(source: TableState | TableOverview) -> list[dict[str, Any]]:
    """One entry per partition, depth-first: its place in the tree, region, files, records
    (from a whole state, or from an overview: the same entries)."""
    overview = source if isinstance(source, TableOverview) else overview_of(source, 0)
    out = []
    for depth, p in overview.tree().depth_first():
        c = overview.count(p.id)
        out.append({
            "id": p.id, "parent": p.parent_id, "depth": depth, "leaf": p.is_leaf,
            "children": list(p.child_ids), "split_dimension": p.dimension,
            "region": [{"field": r.field, "min": encode_value(r.min), "max": encode_value(r.max)}
                       for r in p.region.ranges],
            "files": c.files, "records": c.records, "records_approximate": c.approximate,
        })
    return out


def files_report(state: TableState) -> list[dict[str, Any]]:
    """One entry per tracked file with its references (none: awaiting garbage collection)."""
    return file_entries(state.file_statuses())


def file_entries(statuses: Sequence[FileStatus]) -> list[dict[str, Any]]:
    """The report entries of these files (see :func:`files_report`)."""
    return [{
        "filename": f.filename, "update_time": f.update_time,
        "references": [{"partition": r.partition_id, "records": r.record_count, "approximate": r.count_approximate,
                        "whole_file": r.whole_file, "job_id": r.job_id} for r in f.references],
    } for f in statuses]


def render_partitions(state: TableState) -> str:
    rows = partitions_report(state)
    leaves = [r for r in rows if r["leaf"]]
    approximate = any(r["records_approximate"] for r in rows)
    lines = [f"{len(rows)} partitions ({len(leaves)} leaves), {sum(r['files'] for r in rows)} file references, "
             f"{approximately(sum(r['records'] for r in rows), approximate)} records"]
    by_id = {p.id: p for p in state.partitions.values()}
    for r in rows:
        indent = "  " * r["depth"]
        kind = "leaf" if r["leaf"] else f"split on dim {r['split_dimension']}"
        lines.append(f"{indent}{r['id']}  [{kind}]  {region_text(by_id[r['id']].region)}  "
                     f"files={r['files']} records={approximately(r['records'], r['records_approximate'])}")
    if approximate:
        lines.append(APPROXIMATE_NOTE)
    return "\n".join(lines)


def render_files(state: TableState) -> str:
    rows = files_report(state)
    unreferenced = sum(1 for r in rows if not r["references"])
    lines = [f"{len(rows)} files, {unreferenced} unreferenced (awaiting garbage collection)"]
    for r in rows:
        if not r["references"]:
            lines.append(f"{r['filename']}  (no references)")
        for ref in r["references"]:
            job = f" job={ref['job_id']}" if ref["job_id"] else ""
            lines.append(f"{r['filename']}  partition={ref['partition']} records={ref['records']:,}"
                         f"{'~' if ref['approximate'] else ''}{job}")
    return "\n".join(lines)


def jobs_report(jobs: Sequence[JobRecord]) -> list[dict[str, Any]]:
    """One entry per job record (newest first, as given), with its rate in rows/s."""
    return [{**j.to_dict(), "duration_s": j.duration_s, "rate": j.rate} for j in jobs]


def _time(ms: Optional[int]) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_jobs(jobs: Sequence[JobRecord]) -> str:
    counts: dict[str, int] = {}
    for j in jobs:
        counts[j.status] = counts.get(j.status, 0) + 1
    lines = [f"{len(jobs)} jobs" + (" (" + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ")"
                                     if jobs else "")]
    if jobs:
        lines.append(f"{'created (UTC)':19}  {'kind':10}  {'status':9}  {'job':32}  {'partition':36}  "
                     f"{'files':>5}  {'read':>12}  {'written':>12}  {'seconds':>8}  {'rows/s':>11}  reason")
    for j in jobs:
        rate = f"{j.rate:,.0f}" if j.rate is not None else "-"
        secs = f"{j.duration_s:.2f}" if j.duration_s is not None else "-"
        lines.append(f"{_time(j.created_ms):19}  {j.kind:10}  {j.status:9}  {j.job_id:32}  "
                     f"{(j.partition_id or '-'):36}  {j.input_files:>5}  {j.rows_read:>12,}  {j.rows_written:>12,}  "
                     f"{secs:>8}  {rate:>11}  {j.reason or ''}")
    return "\n".join(lines)
