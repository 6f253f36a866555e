"""The status page's charts, as inline SVG: jobs over time (stacked by kind, failures
marked), their rows per second, records per leaf partition against the split
threshold, and the backlog figures over time. Pure functions of job records and partition rows (and the formatting
helpers the pages share)."""


from __future__ import annotations

import html
import json
import math
from datetime import UTC, datetime
from typing import Any, Optional, Sequence

from sleeper_ops.metrics import BACKLOG_FIELDS
from statestore.clock import now_ms
from statestore.jobs import JOB_KINDS, JobRecord

#: The job chart shows at least this much time, ending now.
MIN_CHART_SPAN_MS = 30 * 60_000

KIND_COLOURS = {"compaction": "#4e79a7", "split": "#f28e2b", "ingest": "#59a14f", "bulk_import": "#b07aa1",
                "gc": "#9c755f"}
FAILED_COLOUR = "#e15759"


def esc(v: Any) -> str:
    """``v`` as text safe inside HTML (``&``, ``<``, ``>`` and quotes escaped)."""
    return html.escape(str(v))


def utc_time(ms: Optional[int]) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DD HH:MM:SS`` in UTC; ``-`` for None."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _count(n: float) -> str:
    """3 significant figures with k/M/G."""
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            return f"{n / div:.3g}{suffix}"
    return f"{n:.3g}" if isinstance(n, float) and not n.is_integer() else f"{int(n)}"


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
                         f"fill='{colour}'><title>{esc(utc_time(start + i * bucket))}: {k} {kind}</title></rect>")
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
                     f"<title>{esc(j.kind)} {esc(j.job_id)}: {rate:,.0f} rows/s, {j.rows_read:,} rows</title></circle>")
    parts.append(f"<text x='{left}' y='{height - 4}'>{utc_time(lo)}</text>"
                 f"<text x='{width - right}' y='{height - 4}' text-anchor='end'>{utc_time(hi)} UTC</text></svg>")
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
                     f"height='{h:.1f}' fill='{KIND_COLOURS['compaction']}'><title>{esc(p['id'])}: "
                     f"[{esc(lo)}, {esc(hi)}) {p['records']:,}{'~' if p.get('records_approximate') else ''} records in "
                     f"{p['files']} files</title></rect>")
    if show_threshold:
        y = pad_top + ph - threshold / top * ph
        parts.append(f"<line x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}' stroke='{FAILED_COLOUR}' "
                     f"stroke-dasharray='6 3'/><text x='{width - right}' y='{y - 3:.1f}' text-anchor='end'>"
                     f"split threshold {_count(threshold)}</text>")
    parts.append(f"<text x='{left}' y='{height - 4}'>first key</text><text x='{width - right}' y='{height - 4}' "
                 f"text-anchor='end'>last key ({len(leaves)} leaves)</text></svg>")
    return "".join(parts)


BACKLOG_LABELS = {"buffer_records": "buffered records", "buffer_oldest_seconds": "oldest buffered write (s)",
                  "ingest_requests_pending": "ingest requests pending",
                  "compaction_jobs_pending": "compaction jobs pending", "gc_files_pending": "files awaiting GC"}


def backlog_charts_svg(samples: Sequence[Any], *, width: int = 172, height: int = 96) -> str:
    """The backlog over time: one small line chart per figure of
    :data:`sleeper_ops.metrics.BACKLOG_FIELDS` (samples: ``BacklogSample``), its newest
    value in the title; each chart carries its values (``data-values``, oldest first)."""
    if not samples:
        return "<p class='muted'>No samples yet (one is taken each time this page or /metrics is read).</p>"
    t0, t1 = samples[0].at_ms, samples[-1].at_ms
    span = max(t1 - t0, 1)
    left, right, pad_top, bottom = 6, 6, 30, 16
    pw, ph = width - left - right, height - pad_top - bottom
    out = ["<div class='cards'>"]
    for field in BACKLOG_FIELDS:
        values = [s.value(field) for s in samples]
        top = max(max(values), 1.0)
        points = [(left + ((s.at_ms - t0) / span * pw if t1 > t0 else pw / 2), pad_top + ph - v / top * ph, s, v)
                  for s, v in zip(samples, values)]
        parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
                 f"aria-label='backlog: {field}' data-values='{esc(json.dumps(values))}'>",
                 f"<text x='{left}' y='12'>{esc(BACKLOG_LABELS.get(field, field))}</text>",
                 f"<text x='{left}' y='26' font-weight='bold'>{_count(values[-1])}</text>",
                 f"<line class='axis' x1='{left}' x2='{width - right}' y1='{pad_top + ph}' y2='{pad_top + ph}'/>"]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
            parts.append(f"<polyline points='{path}' fill='none' stroke='{KIND_COLOURS['compaction']}' "
                         "stroke-width='1.5'/>")
        for x, y, s, v in points:
            parts.append(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='2' fill='{KIND_COLOURS['compaction']}'>"
                         f"<title>{esc(utc_time(s.at_ms))}: {_count(v)}</title></circle>")
        parts.append(f"<text x='{left}' y='{height - 3}'>{esc(utc_time(t0)[11:])}</text><text x='{width - right}' "
                     f"y='{height - 3}' text-anchor='end'>{esc(utc_time(t1)[11:])}</text></svg>")
        out.append("".join(parts))
    out.append("</div>")
    return "".join(out)
