"""The printed report of ``bench/peers.py``: content check, every method's figures (median
and spread over the runs), the best method of each peer against ours, natively and SQL to
SQL, with ratios computed within each run. Imports only the standard library."""

from __future__ import annotations

import statistics
from typing import Any

#: figure -> True when more is better
FIGURES = {"exact p50": False, "exact p95": False, "range p50": False, "range p95": False,
           "load rows/s": True, "maintain s": False}
Key = tuple[str, str, str]  # system, method, api


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def figures(r: dict[str, Any], rows: int) -> dict[str, float]:
    """One method's figures in one run."""
    return {"exact p50": _pct(r["exact"]["ms"], 0.5), "exact p95": _pct(r["exact"]["ms"], 0.95),
            "range p50": _pct(r["range"]["ms"], 0.5), "range p95": _pct(r["range"]["ms"], 0.95),
            "load rows/s": rows / sum(r["loads"]), "maintain s": r["maintain"]}


def _cell(xs: list[float], figure: str) -> str:
    fmt = "{:,.0f}" if figure == "load rows/s" else "{:.1f}" if figure == "maintain s" else "{:.2f}"
    med = fmt.format(statistics.median(xs))
    return med if len(xs) == 1 else f"{med} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def mismatches(results: list[dict[str, Any]]) -> list[str]:
    """Every (system, method, api, run) whose rows differ from ours' first run's, per query."""
    base = next(r for r in results if r["system"] == "ours" and r["api"] == "native")
    out = []
    for r in results:
        for kind in ("exact", "range"):
            bad = sum(a != b for a, b in zip(r[kind]["digest"], base[kind]["digest"]))
            bad += abs(len(r[kind]["digest"]) - len(base[kind]["digest"]))
            if bad:
                out.append(f"MISMATCH: {r['system']} / {r['method']} / {r['api']} (run {r['run'] + 1}): "
                           f"{bad} of {len(base[kind]['digest'])} {kind} queries returned other rows than ours")
    return out


def _best(per_run: dict[Key, list[dict[str, float]]], keys: list[Key], figure: str) -> Key:
    more = FIGURES[figure]
    return (max if more else min)(keys, key=lambda k: statistics.median(f[figure] for f in per_run[k]))


def compare(title: str, per_run: dict[Key, list[dict[str, float]]], ours: Key, peers: dict[str, list[Key]],
            ratios: bool) -> None:
    """Ours against each peer's best method per figure, then the ratios peer / ours per run."""
    cols = list(FIGURES)
    print(f"\n{title}: ours and each peer's best method per figure (method letters as above)")
    print("| system | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    letters = {k: chr(ord("a") + i) for i, k in enumerate(per_run)}
    print("| ours | " + " | ".join(_cell([f[c] for f in per_run[ours]], c) for c in cols) + " |")
    for system, keys in peers.items():
        cells = []
        for c in cols:
            b = _best(per_run, keys, c)
            cells.append(f"{_cell([f[c] for f in per_run[b]], c)} [{letters[b]}]")
        print(f"| {system} best | " + " | ".join(cells) + " |")
    if not ratios:
        return
    print(f"\n{title}: ratios peer best / ours, each from one run (latency, maintenance: > 1 means ours is "
          "faster; load rows/s: > 1 means the peer loads faster)")
    print("| system | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for system, keys in peers.items():
        cells = []
        for c in cols:
            b = _best(per_run, keys, c)
            rs = [p[c] / o[c] for p, o in zip(per_run[b], per_run[ours])]
            cells.append(_cell(rs, "ratio"))
        print(f"| {system} best | " + " | ".join(cells) + " |")


def report(results: list[dict[str, Any]], threads: dict[str, dict[str, Any]], rows: int, appends: int,
           runs: int) -> int:
    """Print the report; the exit status: 1 if any result differs from ours, else 0."""
    print("\nthreads:")
    for where, settings in threads.items():
        print(f"  {where}: " + ", ".join(f"{k} = {v}" for k, v in settings.items()))
    bad = mismatches(results)
    for line in bad:
        print(line)
    per_run: dict[Key, list[dict[str, float]]] = {}
    meta: dict[Key, dict[str, Any]] = {}
    for r in results:
        k = (r["system"], r["method"], r["api"])
        per_run.setdefault(k, []).append(figures(r, rows))
        meta[k] = r
    base = results[0]
    print(f"\n{rows:,} rows in {appends} appends, {runs} interleaved runs; {len(base['exact']['ms'])} exact-key and "
          f"{len(base['range']['ms'])} range queries per method (~{statistics.mean(base['range']['rows']):,.0f} rows "
          "per range); every result checked by content; latency in ms; each figure the median over the runs "
          "(min–max)")
    cols = list(FIGURES)
    print("| | system | method | API | files | rows/group | " + " | ".join(cols) + " |")
    print("|---|---|---|---|---:|---:|" + "---:|" * len(cols))
    for i, (k, fs) in enumerate(per_run.items()):
        m = meta[k]
        print(f"| {chr(ord('a') + i)} | {k[0]} | {k[1]} | {k[2]} | {m['files']} | {m['group_rows']:,} | "
              + " | ".join(_cell([f[c] for f in fs], c) for c in cols) + " |")
    ok = not bad
    if not ok:
        print("\nno ratios: some results differ from ours (MISMATCH above)")
    keys = list(per_run)
    peers = list(dict.fromkeys(k[0] for k in keys if k[0] != "ours"))
    if peers:
        compare("ours (query runner) against any method", per_run, ("ours", "query runner", "native"),
                {p: [k for k in keys if k[0] == p] for p in peers}, ok)
        compare("SQL to SQL", per_run, ("ours", "Sleeper.sql", "SQL"),
                {p: [k for k in keys if k[0] == p and k[2] == "SQL"] for p in peers}, ok)
    return 0 if ok else 1
