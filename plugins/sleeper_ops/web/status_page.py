"""The table status page: tables, partition tree, files and job history, as HTML.

:func:`create_status_app` builds a small FastAPI app that the Airflow plugin mounts at
``/sleeper/ui`` and links from the UI's navigation (an ``external_views`` entry, shown
inside the Airflow UI). Pages, rendered on the server with no JavaScript and nothing
fetched from elsewhere (charts are inline SVG, so it works with no internet):

* ``/`` - every table: online or not, leaf partitions, files, records, jobs by status;
* ``/tables/{name}`` - one table: records per leaf partition across the key space
  (against the split threshold), the partition tree with files and records per
  partition, jobs plotted over time (stacked by kind, failures marked) and their rows/s,
  the latest jobs, and the file references.

Authentication is whatever ``auth_dependency`` enforces (the plugin passes Airflow's:
the UI's ``_token`` cookie or a bearer token); a refused request gets a small HTML page
with the status code and a link to sign in.

The renderers (:func:`render_index`, :func:`render_table`, :func:`jobs_chart_svg`,
:func:`leaf_records_svg`) are pure functions of state and job records.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence
from urllib.parse import quote

from sleeper_ops.reports import partitions_report, region_text
from statestore.jobs import JOB_KINDS, JobRecord, now_ms

if TYPE_CHECKING:
    from fastapi import FastAPI

    from sleeper_ops.api import Sleeper
    from statestore.catalog import TableInfo
    from statestore.state import TableState

URL_PREFIX = "/sleeper/ui"
#: The Airflow plugin's ``external_views`` entry for the page (href relative to the UI's base).
EXTERNAL_VIEW = {"name": "Sleeper tables", "href": "sleeper/ui/", "destination": "nav", "category": "browse",
                 "url_route": "sleeper-tables"}
DEFAULT_JOB_LIMIT = 1000
MAX_FILE_ROWS = 500
#: The job chart shows at least this much time, ending now.
MIN_CHART_SPAN_MS = 30 * 60_000

KIND_COLOURS = {"compaction": "#4e79a7", "split": "#f28e2b", "ingest": "#59a14f", "bulk_import": "#b07aa1",
                "gc": "#9c755f"}
FAILED_COLOUR = "#e15759"

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


def _e(v: Any) -> str:
    return html.escape(str(v))


def _time(ms: Optional[int]) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _count(n: float) -> str:
    """3 significant figures with k/M/G."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}" if isinstance(n, float) and not n.is_integer() else f"{int(n)}"


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

    @classmethod
    def of(cls, info: TableInfo, state: TableState, jobs: Sequence[JobRecord]) -> TableSummary:
        by_status: dict[str, int] = {}
        for j in jobs:
            by_status[j.status] = by_status.get(j.status, 0) + 1
        return cls(info.name, info.table_id, info.online, len(state.partitions),
                   sum(1 for p in state.partitions.values() if p.is_leaf), len(state.files), len(state.references),
                   sum(r.record_count for r in state.references.values()), by_status,
                   max((j.last_update_ms for j in jobs), default=None))


def _table_href(name: str) -> str:
    return f"tables/{quote(name, safe='')}"


def render_index(tables: Sequence[TableSummary]) -> str:
    """The list of tables."""
    rows = []
    for t in tables:
        jobs = ", ".join(f"{n} {s}" for s, n in sorted(t.jobs_by_status.items())) or "none"
        badge = "<span class='badge online'>online</span>" if t.online else "<span class='badge offline'>offline</span>"
        rows.append(f"<tr><td><a href='{_table_href(t.name)}'>{_e(t.name)}</a><div class='muted mono'>"
                    f"{_e(t.table_id)}</div></td><td>{badge}</td><td class='num'>{t.leaves}/{t.partitions}</td>"
                    f"<td class='num'>{t.files:,}</td><td class='num'>{t.records:,}</td><td>{_e(jobs)}</td>"
                    f"<td>{_time(t.last_job_ms)}</td></tr>")
    table = ("<table><tr><th>table</th><th>state</th><th class='num'>leaves/partitions</th><th class='num'>files</th>"
             "<th class='num'>records</th><th>recent jobs</th><th>last job (UTC)</th></tr>"
             + "".join(rows) + "</table>") if rows else "<p class='muted'>No tables yet: create one with " \
                                                        "<span class='mono'>sleeper table create</span>.</p>"
    return _page("Sleeper tables", f"<h1>Sleeper tables</h1><p class='muted'>{len(tables)} tables</p>{table}")


# ----- charts ----------------------------------------------------------------------------------
_BUCKETS_MS = [60_000 * m for m in (1, 2, 5, 10, 15, 30, 60, 120, 360, 720, 1440, 2880, 10080)]


def _bucket_ms(span_ms: int, target: int = 40) -> int:
    for b in _BUCKETS_MS:
        if span_ms / b <= target:
            return b
    return _BUCKETS_MS[-1]


def _axis_time(ms: int, bucket: int) -> str:
    fmt = "%H:%M" if bucket < 1440 * 60_000 else "%m-%d"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime(fmt)


def jobs_chart_svg(jobs: Sequence[JobRecord], *, now: Optional[int] = None, width: int = 900,
                   height: int = 220) -> str:
    """Jobs over time: one stacked bar per time bucket (by job kind, failed jobs in red
    on top), by the time each job last changed; empty-state text when there are none."""
    if not jobs:
        return "<p class='muted'>No jobs recorded yet.</p>"
    now = now_ms() if now is None else now
    times = [j.last_update_ms for j in jobs]
    hi = max(max(times), now)
    lo = min(min(times), hi - MIN_CHART_SPAN_MS)
    bucket = _bucket_ms(hi - lo)
    start = lo // bucket * bucket
    n = int((hi - start) // bucket) + 1
    counts = [dict.fromkeys((*JOB_KINDS, "failed"), 0) for _ in range(n)]
    for j, t in zip(jobs, times):
        counts[int((t - start) // bucket)]["failed" if j.status == "failed" else j.kind] += 1
    step = max(1, math.ceil(max(sum(c.values()) for c in counts) / 4))  # whole jobs per grid line
    top = step * 4
    left, right, pad_top, bottom = 40, 10, 10, 36
    pw, ph = width - left - right, height - pad_top - bottom
    bw = pw / n
    scale = ph / top
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='jobs over time'>"]
    for i in range(5):
        v = step * i
        y = pad_top + ph - v * scale
        parts.append(f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='{left - 4}' y='{y + 4:.1f}' text-anchor='end'>{_count(v)}</text>")
    for i, c in enumerate(counts):
        x = left + i * bw
        y = pad_top + ph
        for kind in (*JOB_KINDS, "failed"):
            k = c[kind]
            if not k:
                continue
            h = k * scale
            y -= h
            colour = FAILED_COLOUR if kind == "failed" else KIND_COLOURS.get(kind, "#999")
            parts.append(f"<rect x='{x + 1:.1f}' y='{y:.1f}' width='{max(bw - 2, 1):.1f}' height='{h:.1f}' "
                         f"fill='{colour}'><title>{_e(_time(start + i * bucket))}: {k} {kind}</title></rect>")
    labels = max(1, n // 8)
    for i in range(0, n, labels):
        x = left + i * bw + bw / 2
        parts.append(f"<text x='{x:.1f}' y='{height - bottom + 14}' text-anchor='middle'>"
                     f"{_axis_time(start + i * bucket, bucket)}</text>")
    parts.append(f"<line class='axis' x1='{left}' x2='{width - right}' y1='{pad_top + ph}' y2='{pad_top + ph}'/>")
    lx = left
    for kind in (*JOB_KINDS, "failed"):
        colour = FAILED_COLOUR if kind == "failed" else KIND_COLOURS.get(kind, "#999")
        parts.append(f"<rect x='{lx}' y='{height - 12}' width='10' height='10' fill='{colour}'/>"
                     f"<text x='{lx + 14}' y='{height - 3}'>{kind}</text>")
        lx += 24 + 7 * len(kind)
    parts.append(f"<text x='{width - right}' y='{height - 3}' text-anchor='end'>per "
                 f"{bucket // 60_000} min, UTC</text></svg>")
    return "".join(parts)


def rate_chart_svg(jobs: Sequence[JobRecord], *, width: int = 900, height: int = 180) -> str:
    """Rows read per second of each finished job over time (log scale), by kind."""
    points = [(j.finished_ms, j.rate, j) for j in jobs if j.finished_ms is not None and j.rate]
    if not points:
        return ""
    lo = min(p[0] for p in points)
    hi = max(p[0] for p in points)
    span = max(hi - lo, 1)
    rmin = min(p[1] for p in points)
    rmax = max(p[1] for p in points)
    lmin, lmax = math.floor(math.log10(rmin)), math.ceil(math.log10(rmax))
    if lmax == lmin:
        lmax += 1
    left, right, pad_top, bottom = 48, 10, 10, 22
    pw, ph = width - left - right, height - pad_top - bottom

    def y_of(rate: float) -> float:
        return pad_top + ph - (math.log10(rate) - lmin) / (lmax - lmin) * ph

    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='job rates'>"]
    for e in range(lmin, lmax + 1):
        y = y_of(10.0 ** e)
        parts.append(f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='{left - 4}' y='{y + 4:.1f}' text-anchor='end'>{_count(10 ** e)}/s</text>")
    for t, rate, j in points:
        x = left + (t - lo) / span * pw if hi > lo else left + pw / 2
        colour = FAILED_COLOUR if j.status == "failed" else KIND_COLOURS.get(j.kind, "#999")
        parts.append(f"<circle cx='{x:.1f}' cy='{y_of(rate):.1f}' r='3.5' fill='{colour}' fill-opacity='0.8'>"
                     f"<title>{_e(j.kind)} {_e(j.job_id)}: {rate:,.0f} rows/s, {j.rows_read:,} rows</title></circle>")
    parts.append(f"<text x='{left}' y='{height - 4}'>{_time(lo)}</text>"
                 f"<text x='{width - right}' y='{height - 4}' text-anchor='end'>{_time(hi)} UTC</text></svg>")
    return "".join(parts)


def leaf_records_svg(partitions: Sequence[dict[str, Any]], threshold: int, *, width: int = 900,
                     height: int = 160) -> str:
    """Records of each leaf partition, in key order, against the split threshold."""
    leaves = [p for p in partitions if p["leaf"]]
    if not leaves:
        return ""
    top = max(max(p["records"] for p in leaves), 1)
    show_threshold = threshold <= top * 2
    if show_threshold:
        top = max(top, threshold)
    left, right, pad_top, bottom = 48, 10, 18, 20
    pw, ph = width - left - right, height - pad_top - bottom
    bw = pw / len(leaves)
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
             f"aria-label='records per leaf partition'>"]
    for i in range(3):
        v = top * i / 2
        y = pad_top + ph - v / top * ph
        parts.append(f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
                     f"<text x='{left - 4}' y='{y + 4:.1f}' text-anchor='end'>{_count(v)}</text>")
    for i, p in enumerate(leaves):
        h = p["records"] / top * ph
        x = left + i * bw
        lo = json.dumps(p["region"][0]["min"]) if p["region"] else "?"
        hi = "∞" if not p["region"] or p["region"][0]["max"] is None else json.dumps(p["region"][0]["max"])
        parts.append(f"<rect x='{x + 1:.1f}' y='{pad_top + ph - h:.1f}' width='{max(bw - 2, 1):.1f}' "
                     f"height='{h:.1f}' fill='{KIND_COLOURS['compaction']}'><title>{_e(p['id'])}: "
                     f"[{_e(lo)}, {_e(hi)}) {p['records']:,} records in {p['files']} files</title></rect>")
    if show_threshold:
        y = pad_top + ph - threshold / top * ph
        parts.append(f"<line x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}' stroke='{FAILED_COLOUR}' "
                     f"stroke-dasharray='6 3'/><text x='{width - right}' y='{y - 3:.1f}' text-anchor='end'>"
                     f"split threshold {_count(threshold)}</text>")
    parts.append(f"<text x='{left}' y='{height - 4}'>first key</text><text x='{width - right}' y='{height - 4}' "
                 f"text-anchor='end'>last key ({len(leaves)} leaves)</text></svg>")
    return "".join(parts)


# ----- the table page ----------------------------------------------------------------------------
def _tree_html(state: TableState, rows: Sequence[dict[str, Any]], key_fields: Sequence[str]) -> str:
    by_id = {r["id"]: r for r in rows}
    top = max((r["records"] for r in rows), default=0) or 1
    tree = state.tree()

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
        return (f"<li>{bar}<span class='mono'>{_e(region_text(p.region))}</span> <span class='muted'>[{_e(kind)}]"
                f"</span> {r['files']} files, {r['records']:,}{approx} records <span class='muted mono'>{_e(pid)}"
                f"</span>{'<ul class=tree>' + inner + '</ul>' if inner else ''}</li>")

    return f"<ul class='tree'>{node(tree.root.id)}</ul>" if tree.root is not None else ""


def _jobs_table(jobs: Sequence[JobRecord], limit: int = 50) -> str:
    rows = []
    for j in jobs[:limit]:
        status = "<span class='badge failed'>failed</span>" if j.status == "failed" else _e(j.status)
        rate = f"{j.rate:,.0f}" if j.rate else "-"
        secs = f"{j.duration_s:.2f}" if j.duration_s is not None else "-"
        rows.append(f"<tr><td>{_time(j.created_ms)}</td><td>{_e(j.kind)}</td><td>{status}</td>"
                    f"<td class='mono'>{_e(j.job_id[:12])}</td><td class='num'>{j.input_files}</td>"
                    f"<td class='num'>{j.rows_read:,}</td><td class='num'>{j.rows_written:,}</td>"
                    f"<td class='num'>{secs}</td><td class='num'>{rate}</td><td class='mono'>{_e(j.run_id or '')}"
                    f"</td><td>{_e(j.reason or '')}</td></tr>")
    if not rows:
        return ""
    return ("<table><tr><th>created (UTC)</th><th>kind</th><th>status</th><th>job</th><th class='num'>files</th>"
            "<th class='num'>read</th><th class='num'>written</th><th class='num'>s</th><th class='num'>rows/s</th>"
            "<th>run</th><th>reason</th></tr>" + "".join(rows) + "</table>")


def _files_table(state: TableState) -> str:
    statuses = state.file_statuses()
    unreferenced = sum(1 for f in statuses if not f.references)
    rows = []
    for f in statuses[:MAX_FILE_ROWS]:
        if not f.references:
            rows.append(f"<tr><td class='mono'>{_e(f.filename)}</td><td class='muted'>no references "
                        f"(awaiting GC)</td><td></td><td></td></tr>")
        for r in f.references:
            rows.append(f"<tr><td class='mono'>{_e(f.filename)}</td><td class='mono'>{_e(r.partition_id)}</td>"
                        f"<td class='num'>{r.record_count:,}{'~' if r.count_approximate else ''}</td>"
                        f"<td class='mono'>{_e(r.job_id or '')}</td></tr>")
    more = (f"<p class='muted'>showing {MAX_FILE_ROWS} of {len(statuses)} files</p>"
            if len(statuses) > MAX_FILE_ROWS else "")
    return (f"<p class='muted'>{len(statuses)} files, {len(state.references)} references, {unreferenced} "
            f"unreferenced</p>" + ("<table><tr><th>file</th><th>partition</th><th class='num'>records</th>"
                                   "<th>job</th></tr>" + "".join(rows) + "</table>" if rows else "") + more)


def render_table(info: TableInfo, state: TableState, jobs: Sequence[JobRecord], *,
                 now: Optional[int] = None) -> str:
    """The page of one table (see the module docstring)."""
    rows = partitions_report(state)
    summary = TableSummary.of(info, state, jobs)
    badge = "<span class='badge online'>online</span>" if info.online else "<span class='badge offline'>offline</span>"
    failed = summary.jobs_by_status.get("failed", 0)
    props = ", ".join(f"{_e(k)}={_e(v)}" for k, v in sorted(info.properties.items())) or "defaults only"
    dag_links = " · ".join(f"<a target='_top' href='../../../dags/sleeper_{quote(info.name, safe='')}_{op}'>{op}</a>"
                           for op in ("split", "compaction", "gc", "ingest_batcher"))
    body = [
        "<nav><a href='../'>← all tables</a></nav>",
        f"<h1>{_e(info.name)} {badge}</h1><div class='muted mono'>{_e(info.table_id)}</div>",
        f"<p class='muted'>DAGs: {dag_links}<br>properties set: <span class='mono'>{props}</span></p>",
        "<div class='cards'>"
        f"<div class='card'><b>{summary.records:,}</b>records</div>"
        f"<div class='card'><b>{summary.leaves}</b>leaf partitions of {summary.partitions}</div>"
        f"<div class='card'><b>{summary.files:,}</b>files ({summary.references:,} references)</div>"
        f"<div class='card'><b>{len(jobs):,}</b>jobs{f' ({failed} failed)' if failed else ''}</div></div>",
        "<h2>Records per leaf partition</h2>",
        leaf_records_svg(rows, info.get_int("sleeper.table.partition.splitting.threshold")),
        "<h2>Jobs over time</h2>", jobs_chart_svg(jobs, now=now), rate_chart_svg(jobs),
        "<h2>Partition tree</h2>", _tree_html(state, rows, [f.name for f in info.schema.row_key_fields]),
        "<h2>Latest jobs</h2>", _jobs_table(jobs) or "<p class='muted'>none</p>",
        "<h2>Files</h2>", _files_table(state),
    ]
    return _page(f"Sleeper table {info.name}", "".join(body))


def render_refused(status_code: int, detail: str) -> str:
    return _page("Sleeper: not signed in", f"<h1>{status_code}</h1><p>{_e(detail)}</p>"
                 "<p><a target='_top' href='/'>Sign in to Airflow</a> and open this page from its menu.</p>")


# ----- the app ---------------------------------------------------------------------------------
def create_status_app(sleeper_provider: Callable[[], Sleeper], *,
                      auth_dependency: Optional[Callable[..., Any]] = None,
                      job_limit: int = DEFAULT_JOB_LIMIT) -> FastAPI:
    """The status page app over the Sleeper ``sleeper_provider()`` returns (per request);
    ``auth_dependency`` guards every page."""
    from fastapi import Depends, FastAPI, HTTPException, Query, Request
    from fastapi.responses import HTMLResponse

    from statestore.errors import TableNotFoundError

    app = FastAPI(title="Sleeper table status", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(auth_dependency)] if auth_dependency is not None else [])

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> HTMLResponse:
        return HTMLResponse(render_refused(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=exc.headers)

    @app.get("/", response_class=HTMLResponse)
    def index() -> HTMLResponse:
        sleeper = sleeper_provider()
        out = []
        for info in sleeper.tables():
            state = sleeper.state_store.load_state(info.table_id)
            jobs = sleeper.state_store.list_jobs(info.table_id, limit=job_limit)
            out.append(TableSummary.of(info, state, jobs))
        return HTMLResponse(render_index(out))

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str, jobs: int = Query(job_limit, ge=1, le=100_000)) -> HTMLResponse:
        sleeper = sleeper_provider()
        try:
            info = sleeper.state_store.get_table(name)
        except TableNotFoundError as e:
            raise HTTPException(404, str(e)) from None
        state = sleeper.state_store.load_state(info.table_id)
        records = sleeper.state_store.list_jobs(info.table_id, limit=jobs)
        return HTMLResponse(render_table(info, state, records))

    return app
