"""The status page's HTML: pure functions of table state and job records.

:func:`render_index` (every table), :func:`render_table` (one table: records per leaf,
the partition tree, jobs over time, the latest jobs, files) and :func:`render_refused`.
Pages are self-contained: no JavaScript, nothing fetched from elsewhere; the charts
(:mod:`sleeper_ops.web.status_charts`) are inline SVG.
"""


from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence
from urllib.parse import quote

from sleeper_ops.reports import APPROXIMATE_NOTE, approximately, partitions_report, region_text
from sleeper_ops.web.status_charts import (
    backlog_charts_svg,
    esc,
    jobs_chart_svg,
    leaf_records_svg,
    rate_chart_svg,
    utc_time,
)
from statestore.jobs import JobRecord
from statestore.properties import BULK_IMPORT_SOURCE, EXPORT_DESTINATION, OPERATIONS, PARTITION_SPLITTING_THRESHOLD

if TYPE_CHECKING:
    from statestore.catalog import TableInfo
    from statestore.overview import TableOverview

MAX_FILE_ROWS = 500

_CSS = """
:root { color-scheme: light dark; --fg: #1a202c; --muted: #64748b; --bg: #ffffff; --card: #f7f8fa;
        --line: #d9dee5; --accent: #017cee; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e2e8f0; --muted: #94a3b8; --bg: #10151c; --card: #1a212b; --line: #2d3746; --accent: #4aa3ff; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       background: var(--bg); margin: 0; padding: 16px 24px; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
a { color: var(--accent); text-decoration: none; } a:hover { text-decoration: underline; }
.muted { color: var(--muted); } .mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; margin: 12px 0; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 8px 14px;
        min-width: 120px; }
.card b { display: block; font-size: 20px; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: 4px 8px;
  border-bottom: 1px solid var(--line); vertical-align: top; } th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0 8px; border-radius: 10px; font-size: 12px; color: #fff; }
.online { background: #2f9e44; } .offline { background: #868e96; } .failed { background: #e15759; }
.problem { color: #e15759; overflow-wrap: anywhere; }
a.name { display: inline-block; max-width: 36ch; overflow: hidden; text-overflow: ellipsis; white-space: nowrap;
         vertical-align: bottom; }
h1 { overflow-wrap: anywhere; }
.tree { list-style: none; padding-left: 18px; margin: 0; } .tree > li { margin: 2px 0; }
.bar { display: inline-block; height: 8px; background: var(--accent); border-radius: 2px; vertical-align: middle; }
svg text { fill: var(--fg); font: 11px system-ui, sans-serif; } svg .axis { stroke: var(--line); }
svg .grid { stroke: var(--line); stroke-dasharray: 2 3; }
nav { margin-bottom: 12px; }
"""


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'><style>{_CSS}</style></head>"
            f"<body>{body}</body></html>")


# ----- summaries -------------------------------------------------------------------------------
@dataclass(frozen=True)
class TableSummary:
    """One row of the index page."""

    name: str
    table_id: str
    online: bool
    partitions: int
    leaves: int
    files: int
    references: int
    records: int
    jobs_by_status: dict[str, int]
    last_job_ms: Optional[int]
    #: Why the table's DAGs cannot be built (what the DAG files report), or None.
    dag_problem: Optional[str] = None
    #: ``records`` includes estimated counts (shown ``~``, see :data:`sleeper_ops.reports.APPROXIMATE_NOTE`)
    records_approximate: bool = False

    @classmethod
    def of(cls, info: TableInfo, overview: TableOverview, jobs: Sequence[JobRecord],
           dag_problem: Optional[str] = None) -> TableSummary:
        by_status: dict[str, int] = {}
        for j in jobs:
            by_status[j.status] = by_status.get(j.status, 0) + 1
        return cls(info.name, info.table_id, info.online, len(overview.partitions), overview.leaves, overview.files,
                   overview.references, overview.records, by_status,
                   max((j.last_update_ms for j in jobs), default=None), dag_problem, overview.records_approximate)

    def records_text(self) -> str:
        """The records figure as shown: ``1,234``, or ``1,234~`` with a tooltip when estimated."""
        if not self.records_approximate:
            return f"{self.records:,}"
        return f"<span title='{esc(APPROXIMATE_NOTE)}'>{approximately(self.records, True)}</span>"


def _table_href(name: str) -> str:
    return f"tables/{quote(name, safe='')}"


def _dag_problem_html(problem: Optional[str]) -> str:
    """The red mark of a table whose DAGs cannot be built, with the reason."""
    if problem is None:
        return ""
    return f"<span class='badge failed'>DAGs cannot be built</span><div class='problem'>{esc(problem)}</div>"


def render_index(tables: Sequence[TableSummary]) -> str:
    """The list of tables. A long name is cut with an ellipsis (the whole name in its
    title), so the columns stay on screen; a table whose DAGs cannot be built is marked red,
    with the reason."""
    rows = []
    for t in tables:
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(t.jobs_by_status.items())) or "none"
        badge = "<span class='badge online'>online</span>" if t.online else "<span class='badge offline'>offline</span>"
        rows.append(f"<tr><td><a class='name' title='{esc(t.name)}' href='{_table_href(t.name)}'>{esc(t.name)}</a>"
                    f"<div class='muted mono'>{esc(t.table_id)}</div>{_dag_problem_html(t.dag_problem)}</td>"
                    f"<td>{badge}</td><td class='num'>{t.leaves}/{t.partitions}</td>"
                    f"<td class='num'>{t.files:,}</td><td class='num'>{t.records_text()}</td><td>{esc(jobs)}</td>"
                    f"<td>{utc_time(t.last_job_ms)}</td></tr>")
    table = ("<table><tr><th>table</th><th>state</th><th class='num'>leaves/partitions</th><th class='num'>files</th>"
             "<th class='num'>records</th><th>recent jobs</th><th>last job (UTC)</th></tr>"
             + "".join(rows) + "</table>") if rows else "<p class='muted'>No tables yet: create one with " \
                                                        "<span class='mono'>sleeper table create</span>.</p>"
    return _page("Sleeper tables", f"<h1>Sleeper tables</h1><p class='muted'>{len(tables)} tables</p>{table}")


# ----- the table page ----------------------------------------------------------------------------
def _tree_html(overview: TableOverview, rows: Sequence[dict[str, Any]], key_fields: Sequence[str]) -> str:
    by_id = {r["id"]: r for r in rows}
    top = max((r["records"] for r in rows), default=0) or 1
    tree = overview.tree()

    def node(pid: str) -> str:
        r = by_id[pid]
        p = tree.by_id[pid]
        dim = r["split_dimension"]
        if r["leaf"]:
            kind = "leaf"
        else:
            kind = f"split on {key_fields[dim] if dim is not None and dim < len(key_fields) else dim}"
        bar = (f"<span class='bar' style='width:{max(1, int(120 * r['records'] / top))}px'></span> "
               if r["records"] else "")
        approx = "~" if r["records_approximate"] else ""
        inner = "".join(node(c) for c in p.child_ids)
        return (f"<li>{bar}<span class='mono'>{esc(region_text(p.region))}</span> <span class='muted'>[{esc(kind)}]"
                f"</span> {r['files']} files, {r['records']:,}{approx} records <span class='muted mono'>{esc(pid)}"
                f"</span>{'<ul class=tree>' + inner + '</ul>' if inner else ''}</li>")

    return f"<ul class='tree'>{node(tree.root.id)}</ul>" if tree.root is not None else ""


def _jobs_table(jobs: Sequence[JobRecord], limit: int = 50) -> str:
    rows = []
    for j in jobs[:limit]:
        status = "<span class='badge failed'>failed</span>" if j.status == "failed" else esc(j.status)
        rate = f"{j.rate:,.0f}" if j.rate else "-"
        secs = f"{j.duration_s:.2f}" if j.duration_s is not None else "-"
        rows.append(f"<tr><td>{utc_time(j.created_ms)}</td><td>{esc(j.kind)}</td><td>{status}</td>"
                    f"<td class='mono'>{esc(j.job_id[:12])}</td><td class='num'>{j.input_files}</td>"
                    f"<td class='num'>{j.rows_read:,}</td><td class='num'>{j.rows_written:,}</td>"
                    f"<td class='num'>{secs}</td><td class='num'>{rate}</td><td class='mono'>{esc(j.run_id or '')}"
                    f"</td><td>{esc(j.reason or '')}</td></tr>")
    if not rows:
        return ""
    return ("<table><tr><th>created (UTC)</th><th>kind</th><th>status</th><th>job</th><th class='num'>files</th>"
            "<th class='num'>read</th><th class='num'>written</th><th class='num'>s</th><th class='num'>rows/s</th>"
            "<th>run</th><th>reason</th></tr>" + "".join(rows) + "</table>")


def _files_table(overview: TableOverview) -> str:
    rows = []
    for f in overview.sample[:MAX_FILE_ROWS]:
        if not f.references:
            rows.append(f"<tr><td class='mono'>{esc(f.filename)}</td><td class='muted'>no references "
                        f"(awaiting GC)</td><td></td><td></td></tr>")
        for r in f.references:
            rows.append(f"<tr><td class='mono'>{esc(f.filename)}</td><td class='mono'>{esc(r.partition_id)}</td>"
                        f"<td class='num'>{r.record_count:,}{'~' if r.count_approximate else ''}</td>"
                        f"<td class='mono'>{esc(r.job_id or '')}</td></tr>")
    shown = min(len(overview.sample), MAX_FILE_ROWS)
    more = (f"<p class='muted'>showing the first {shown} of {overview.files} files</p>"
            if overview.files > shown else "")
    return (f"<p class='muted'>{overview.files} files, {overview.references} references, {overview.unreferenced} "
            f"unreferenced</p>" + ("<table><tr><th>file</th><th>partition</th><th class='num'>records</th>"
                                   "<th>job</th></tr>" + "".join(rows) + "</table>" if rows else "") + more)


def _dag_operations(info: TableInfo) -> list[str]:
    """The operations the table has a DAG of: every maintenance DAG, the dated bulk
    import when ``sleeper.table.bulk.import.source`` is set and the dated export when
    ``sleeper.table.export.destination`` is."""
    optional = {"bulk_import": BULK_IMPORT_SOURCE, "export": EXPORT_DESTINATION}
    return [op for op in OPERATIONS if op not in optional or info.get(optional[op])]


def render_table(info: TableInfo, overview: TableOverview, jobs: Sequence[JobRecord], *,
                 now: Optional[int] = None, backlog: Sequence[Any] = (), dag_problem: Optional[str] = None) -> str:
    """The page of one table (see the module docstring), from its overview (at most
    :data:`MAX_FILE_ROWS` files listed) and its backlog samples
    (:class:`sleeper_ops.metrics.BacklogSample`, oldest first). With ``dag_problem`` (why
    its DAGs cannot be built) the table is marked red with the reason, and no DAG is linked."""
    rows = partitions_report(overview)
    summary = TableSummary.of(info, overview, jobs, dag_problem)
    badge = "<span class='badge online'>online</span>" if info.online else "<span class='badge offline'>offline</span>"
    failed = summary.jobs_by_status.get("failed", 0)
    props = ", ".join(f"{esc(k)}={esc(v)}" for k, v in sorted(info.properties.items())) or "defaults only"
    dag_links = (" · ".join(f"<a target='_top' href='../../../dags/sleeper_{quote(info.name, safe='')}_{op}'>{op}</a>"
                            for op in _dag_operations(info)) if dag_problem is None
                 else _dag_problem_html(dag_problem))
    body = [
        "<nav><a href='../'>← all tables</a></nav>",
        f"<h1>{esc(info.name)} {badge}</h1><div class='muted mono'>{esc(info.table_id)}</div>",
        f"<p class='muted'>DAGs: {dag_links}<br>properties set: <span class='mono'>{props}</span></p>",
        "<div class='cards'>"
        f"<div class='card'><b>{summary.records_text()}</b>records</div>"
        f"<div class='card'><b>{summary.leaves}</b>leaf partitions of {summary.partitions}</div>"
        f"<div class='card'><b>{summary.files:,}</b>files ({summary.references:,} references)</div>"
        f"<div class='card'><b>{len(jobs):,}</b>jobs{f' ({failed} failed)' if failed else ''}</div></div>",
        "<h2>Backlog over time</h2>", backlog_charts_svg(backlog),
        "<h2>Records per leaf partition</h2>",
        leaf_records_svg(rows, info.get_int(PARTITION_SPLITTING_THRESHOLD)),
        "<h2>Jobs over time</h2>", jobs_chart_svg(jobs, now=now), rate_chart_svg(jobs),
        "<h2>Partition tree</h2>", _tree_html(overview, rows, [f.name for f in info.schema.row_key_fields]),
        "<h2>Latest jobs</h2>", _jobs_table(jobs) or "<p class='muted'>none</p>",
        "<h2>Files</h2>", _files_table(overview),
    ]
    return _page(f"Sleeper table {info.name}", "".join(body))


def render_refused(status_code: int, detail: str) -> str:
    return _page("Sleeper: not signed in", f"<h1>{status_code}</h1><p>{esc(detail)}</p>"
                 "<p><a target='_top' href='/'>Sign in to Airflow</a> and open this page from its menu.</p>")
