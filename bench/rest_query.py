"""Exact-key lookups over REST: ``GET /tables/{t}/records?key=K`` over one keep-alive HTTP
connection, against the same lookup in process (``Table.query``) in the same run.

Builds a table of Sleeper's system-test schema (16 leaf partitions, one file per leaf)
under a temporary ``SLEEPER_HOME`` (the embedded PostgreSQL), serves the REST app
(:func:`sleeper_ops.web.rest.create_app` over :class:`~sleeper_ops.web.rest.LazySleeper`,
as the Airflow plugin builds it, without Airflow's authentication) with uvicorn in a
child process, and times, interleaved, ``--queries`` lookups each way of keys known to
exist: the REST one whole (request sent, body read and parsed), the in-process one
through this process's own Sleeper over the same home. Every REST answer is checked
by content against the in-process answer for its key (records equal, count, not
truncated); a mismatch exits non-zero. ``--runs`` runs; the figure of merit is the REST
p50 (goal: at most 3 ms), and its ratio to the in-process p50 of the same run, each
printed as the median over the runs and its spread.

    .venv/bin/python bench/rest_query.py [--rows 1000000] [--queries 500] [--runs 3]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any, Iterator

import _common  # noqa: F401
from _common import parse_args, percentiles, stop_embedded
from rest_read_rss import free_port, serve, wait_ready

TABLE = "t"


def build(home: Path, rows: int) -> tuple[Any, list[str]]:
    """The Sleeper over ``home`` with the table built, and keys it holds."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

    (home / "sleeper.toml").write_text('[object_store]\nuri = "data"\n')
    s = Sleeper(home=home)
    t = s.create_table(TABLE, SYSTEM_TEST_SCHEMA, split_points=split_points(15))
    keys: list[str] = []
    step = 1_000_000

    def batches() -> Iterator[Any]:
        for i in range(0, rows, step):
            data = generate_rows(min(step, rows - i), seed=11 + i)
            keys.extend(data.column("key").to_pylist()[::max(1, data.num_rows // 500)])
            yield from data.to_batches()
    t0 = time.perf_counter()
    t.ingest(batches(), max_chunk_rows=4_000_000)
    while len(t.state().references) > 16:
        t.compact(runner="local")
    print(f"built {rows:,} rows in {time.perf_counter() - t0:.1f}s ({len(t.state().references)} files)", flush=True)
    return s, keys


def rest_lookup(conn: http.client.HTTPConnection, key: str) -> Any:
    conn.request("GET", f"/tables/{TABLE}/records?" + urllib.parse.urlencode({"key": json.dumps(key)}))
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"GET records?key={key!r} answered {r.status}: {body[:500]!r}")
    return json.loads(body)


def one_run(conn: http.client.HTTPConnection, table: Any, keys: list[str], queries: int,
            rng: random.Random) -> dict[str, dict[str, float]]:
    rest, local = [], []
    for _ in range(queries):
        key = rng.choice(keys)
        t0 = time.perf_counter()
        got = rest_lookup(conn, key)
        rest.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        want = table.query(keys=[key])
        local.append((time.perf_counter() - t0) * 1000)
        rows = want.to_pylist()
        if not rows or got != {"records": rows, "count": len(rows), "truncated": False}:
            sys.exit(f"REST answered {str(got)[:500]} for key {key!r}; in process: {rows[:5]}")
    return {"rest": percentiles(rest), "local": percentiles(local)}


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):,.2f} ({min(xs):,.2f}–{max(xs):,.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=500, help="lookups each way per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--serve", nargs=2, metavar=("HOME", "PORT"), help=argparse.SUPPRESS)
    args = parse_args(ap, rows=20_000, queries=20, runs=2)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    with tempfile.TemporaryDirectory(prefix="sleeper-bench-rest-") as d:
        home = Path(d)
        sleeper, keys = build(home, args.rows)
        port = free_port()
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(home), str(port)],
                                  env={**os.environ, "SLEEPER_HOME": str(home)})
        try:
            wait_ready(port, server)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            table = sleeper.table(TABLE)
            rng = random.Random(24)
            one_run(conn, table, keys, 20, rng)  # warm: connections, footers, both metadata copies
            runs = [one_run(conn, table, keys, args.queries, rng) for _ in range(args.runs)]
            conn.close()
        finally:
            server.terminate()
            server.wait(30)
            sleeper.close()
            stop_embedded(home)
    print(f"exact-key lookups, {args.rows:,} rows, {args.queries} each way per run, {args.runs} runs "
          "(median over runs, spread):")
    for kind, label in (("rest", "REST GET /records?key= (HTTP, keep-alive)"), ("local", "in process Table.query")):
        print(f"  {label:<42} p50 {spread([r[kind]['p50'] for r in runs])} ms  "
              f"p99 {spread([r[kind]['p99'] for r in runs])} ms")
    print(f"  ratio REST / in process: p50 {spread([r['rest']['p50'] / r['local']['p50'] for r in runs])}  "
          f"p99 {spread([r['rest']['p99'] / r['local']['p99'] for r in runs])}  [goal: REST p50 <= 3 ms]")


if __name__ == "__main__":
    main()
