"""Reports on a table's state: the partition tree and its files, as data or text."""

from __future__ import annotations

from typing import Any

from statestore.region import Region, encode_value
from statestore.state import TableState


def _fmt(v: Any) -> str:
    if v is None:
        return "∞"
    if isinstance(v, bytes):
        return "0x" + v.hex()
    return repr(v)


def region_text(region: Region) -> str:
    return " ".join(f"{r.field}∈[{_fmt(r.min)}, {_fmt(r.max)})" for r in region.ranges)


def partitions_report(state: TableState) -> list[dict[str, Any]]:
    """One entry per partition, depth-first: its place in the tree, region, files, records."""
    records: dict[str, int] = {}
    files: dict[str, int] = {}
    approx: dict[str, bool] = {}
    for ref in state.references.values():
        records[ref.partition_id] = records.get(ref.partition_id, 0) + ref.record_count
        files[ref.partition_id] = files.get(ref.partition_id, 0) + 1
        approx[ref.partition_id] = approx.get(ref.partition_id, False) or ref.count_approximate
    out = []
    for depth, p in state.tree().depth_first():
        out.append({
            "id": p.id, "parent": p.parent_id, "depth": depth, "leaf": p.is_leaf,
            "children": list(p.child_ids), "split_dimension": p.dimension,
            "region": [{"field": r.field, "min": encode_value(r.min), "max": encode_value(r.max)}
                       for r in p.region.ranges],
            "files": files.get(p.id, 0), "records": records.get(p.id, 0),
            "records_approximate": approx.get(p.id, False),
        })
    return out


def files_report(state: TableState) -> list[dict[str, Any]]:
    """One entry per tracked file with its references (none: awaiting garbage collection)."""
    return [{
        "filename": f.filename, "update_time": f.update_time,
        "references": [{"partition": r.partition_id, "records": r.record_count, "approximate": r.count_approximate,
                        "whole_file": r.whole_file, "job_id": r.job_id} for r in f.references],
    } for f in state.file_statuses()]


def render_partitions(state: TableState) -> str:
    rows = partitions_report(state)
    leaves = [r for r in rows if r["leaf"]]
    lines = [f"{len(rows)} partitions ({len(leaves)} leaves), {sum(r['files'] for r in rows)} file references, "
             f"{sum(r['records'] for r in rows):,} records"]
    by_id = {p.id: p for p in state.partitions.values()}
    for r in rows:
        indent = "  " * r["depth"]
        kind = "leaf" if r["leaf"] else f"split on dim {r['split_dimension']}"
        lines.append(f"{indent}{r['id']}  [{kind}]  {region_text(by_id[r['id']].region)}  "
                     f"files={r['files']} records={r['records']:,}{'~' if r['records_approximate'] else ''}")
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
