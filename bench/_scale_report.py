"""The table, the ratios, the plot and the docs section of a ``bench/scale.py`` run."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "operations" / "benchmarks.md"
PNG = ROOT / "docs" / "operations" / "scale.png"
SECTION = "## Scale"

COLUMNS = ("rows", "ingest rows/s", "waiting", "leaves", "files/leaf (max)", "backlog", "exact p50/p99 warm ms",
           "exact p50/p99 cold ms", "range p50/p99 warm ms", "range p50/p99 cold ms", "RSS ingest/maint MB",
           "bytes/row", "commit p50/max ms", "load s", "load avg")


def machine() -> str:
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f", {int(f.readline().split()[1]) / 2**20:.0f} GiB memory"
    except OSError:
        pass
    return f"{os.cpu_count()} cores{mem}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"


def command(argv: list[str]) -> str:
    """The command line that sized the run: ``argv`` without where its outputs went."""
    out, skip = ["bench/scale.py"], False
    for a in argv:
        if skip or a == "--update-docs":
            skip = False
            continue
        if a in ("--json", "--plot", "--dir"):
            skip = True
            continue
        if not a.startswith(("--json=", "--plot=", "--dir=")):
            out.append(a)
    return " ".join(out)


def _pair(p: dict[str, float]) -> str:
    return f"{p['p50']:.2f} / {p['p99']:.2f}"


def cells(cp: dict[str, Any]) -> list[str]:
    return [f"{cp['rows']:,}", f"{cp['ingest_rows_per_s']:,.0f}", f"{cp.get('stalled_share', 0.0):.0%}",
            f"{cp['leaves']}",
            f"{cp['files_per_leaf']:.1f} ({cp['files_per_leaf_max']})", f"{cp['backlog']}",
            _pair(cp["exact_warm"]), _pair(cp["exact_cold"]), _pair(cp["range_warm"]), _pair(cp["range_cold"]),
            f"{cp['rss_ingest_mb']:,.0f} / {cp['rss_maintenance_mb']:,.0f}", f"{cp['bytes_per_row']:.1f}",
            f"{cp['commit_ms']['p50']:.1f} / {cp['commit_ms']['max']:.1f}",
            f"{cp['load_s']:.3f}", f"{cp['loadavg']:.2f}"]


def row_line(cp: dict[str, Any]) -> str:
    """One checkpoint as the line printed when it is taken."""
    return "checkpoint " + "; ".join(f"{c} {v}" for c, v in zip(COLUMNS, cells(cp)))


def ratios(result: dict[str, Any]) -> list[str]:
    """The last checkpoint against the first (the run's baseline), with the goals."""
    cps = result["checkpoints"]
    if len(cps) < 2:
        return ["ratios: one checkpoint only"]
    a, b = cps[0], cps[-1]
    at = f"{b['rows']:,} / {a['rows']:,} rows"
    rss_a = max(a["rss_ingest_mb"], 1e-9)
    return [
        f"ingest rate ratio {at}: {b['ingest_rows_per_s'] / a['ingest_rows_per_s']:.2f} "
        "[goal >= 0.77, i.e. within 1.3x]",
        f"exact-key p50 warm ratio {at}: {b['exact_warm']['p50'] / a['exact_warm']['p50']:.2f} [goal <= 1.3]",
        f"range p50 warm ratio {at}: {b['range_warm']['p50'] / a['range_warm']['p50']:.2f} [goal <= 1.3]",
        f"warm p99 at {b['rows']:,} rows: exact {b['exact_warm']['p99']:.2f} ms, range "
        f"{b['range_warm']['p99']:.2f} ms [goal <= 5 ms]",
        f"peak RSS ratio {at}: ingest {b['rss_ingest_mb'] / rss_a:.2f}, maintenance "
        f"{b['rss_maintenance_mb'] / max(a['rss_maintenance_mb'], 1e-9):.2f} [goal: flat]",
    ]


def markdown(result: dict[str, Any]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells(cp)) + " |" for cp in result["checkpoints"]]
    return "\n".join(lines)


def outcome(result: dict[str, Any]) -> list[str]:
    """The lines after the ratios: an early stop, maintenance catching up, the final count."""
    out = [result["stopped"]] if result["stopped"] else []
    caught = result["caught_up_s"]
    out.append("maintenance caught up (a pass with no split and no compaction job) "
               + (f"{caught:.1f} s after the last batch" if caught is not None else "not within the wait"))
    if result["settled"]:
        st = result["settled"]
        out.append(f"then: {st['leaves']} leaves, {st['files_per_leaf']:.1f} files per leaf (max "
                   f"{st['files_per_leaf_max']}), backlog {st['backlog']} files")
    if result["counted"] is not None:
        out.append(f"rows counted by a full-range query: {result['counted']:,}")
    return out


def table(result: dict[str, Any]) -> str:
    """The whole run's report, as printed at the end."""
    return "\n".join([f"scale: {result['rows']:,} rows ingested ({result['asked']:,} asked); {result['machine']}",
                      markdown(result), *ratios(result), *outcome(result)])


def plot(result: dict[str, Any], path: Path) -> None:
    """The checkpoints drawn into a small PNG at ``path``: ingest rate, lookups, table shape, memory and disk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cps = result["checkpoints"]
    m = [cp["rows"] / 1e6 for cp in cps]
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), dpi=72)
    panels = [
        ("ingest (M rows/s)", [("ingest", [cp["ingest_rows_per_s"] / 1e6 for cp in cps])]),
        ("warm lookups (ms)", [(f"{k} {p}", [cp[f"{k}_warm"][p] for cp in cps])
                               for k in ("exact", "range") for p in ("p50", "p99")]),
        ("cold lookups (ms)", [(f"{k} {p}", [cp[f"{k}_cold"][p] for cp in cps])
                               for k in ("exact", "range") for p in ("p50", "p99")]),
        ("table shape", [("leaves", [cp["leaves"] for cp in cps]),
                         ("files per leaf", [cp["files_per_leaf"] for cp in cps]),
                         ("backlog (files)", [cp["backlog"] for cp in cps])]),
        ("peak RSS (MB)", [("ingest", [cp["rss_ingest_mb"] for cp in cps]),
                           ("maintenance", [cp["rss_maintenance_mb"] for cp in cps])]),
        ("bytes per row; state store (ms)", [("bytes/row on disk", [cp["bytes_per_row"] for cp in cps]),
                                             ("commit p50 ms", [cp["commit_ms"]["p50"] for cp in cps]),
                                             ("load ms", [cp["load_s"] * 1000 for cp in cps])]),
    ]
    for ax, (title, series) in zip(axes.flat, panels):
        for label, ys in series:
            ax.plot(m, ys, marker="o", label=label)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("rows (M)", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.tick_params(labelsize=8)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    load = axes.flat[0].twinx()  # the other work on the machine, beside the rate it slows
    load.plot(m, [cp["loadavg"] for cp in cps], color="grey", linestyle="--", label="load average")
    load.set_ylim(bottom=0)
    load.tick_params(labelsize=8)
    load.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"bench/scale.py: {result['rows']:,} rows; {result['machine']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def update_docs(result: dict[str, Any], doc: Path = DOC, png: Path = PNG) -> None:
    """Replace (or add) the "Scale" section of ``doc`` with this run's table, ratios and plot."""
    plot(result, png)
    loads = [cp["loadavg"] for cp in result["checkpoints"]]
    body = [SECTION, "",
            "`bench/scale.py` grows one table of the system-test schema in batches of 4 M rows while a "
            "second process runs what the split, compaction and GC DAGs' tasks run, and takes a "
            "checkpoint every `--every` rows (lookups checked by content). With no options it asks for "
            "1 B rows, checkpoints every 100 M, and stops early, saying so, when the disk would keep less "
            "than 20% free. An ingest waits while some leaf holds more than `--max-files-per-leaf` files "
            "(the table's `sleeper.table.ingest.max.files.per.leaf`, 8 by default), so ingest goes no faster "
            "than maintenance keeps up with; the waiting column is the share of ingest time spent so "
            "([ADR 0021](../adr/0021-ingest-waits-for-compaction.md): runs with other limits and none). "
            f"Maintenance runs at nice {result.get('maintenance_nice', 0)} (the table's "
            "`sleeper.table.maintenance.nice`, `--maintenance-nice`: 10 by default, as for one machine; "
            "[ADR 0023](../adr/0023-maintenance-yields-the-cpu.md)). "
            "`--update-docs` rewrites this section; `kill PID` stops a run cleanly.", "",
            f"`.venv/bin/python {result['command']}`, {result['date']}, on {result['machine']}; "
            "1-minute load average at the checkpoints "
            f"{min(loads, default=0):.2f}-{max(loads, default=0):.2f} (the run's own ingest, maintenance and "
            "lookup processes included). "
            "What runs and how each figure is taken: the docstring of `bench/scale.py`. Cold lookups are "
            "each the first query of a new process; warm ones repeat a lookup in one process.", "",
            markdown(result), "", *[f"- {line}" for line in ratios(result) + outcome(result)]]
    if max(loads, default=0) > (os.cpu_count() or 1) + 2:  # beyond the run's own processes
        body.append(f"- The machine was busy (load average above its {os.cpu_count()} cores): this run's "
                    "latencies, their p99 most, and its ingest rates measure the other work as much as the table.")
    body += ["", f"![scale: ingest, lookups, table shape, memory and disk by rows]({png.name})", "", ""]
    text = doc.read_text()
    section = "\n".join(body)
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    doc.write_text(text)
