"""Exact-key lookups over REST: ``GET /tables/{t}/records?key=K`` over one keep-alive HTTP
connection, as users call it (through Airflow's API server, with a token) and on the bare
app, against the same lookup in process (``Table.query``), all in the same run.

Builds a table of Sleeper's system-test schema (16 leaf partitions, one file per leaf)
under a temporary ``SLEEPER_HOME`` (the embedded PostgreSQL) and serves it two ways:

* ``airflow``: a real ``airflow api-server`` as ``sleeper airflow`` starts it (its
  environment, the metadata database on the state store's PostgreSQL, the Sleeper plugin
  from its entry point, SimpleAuthManager; :mod:`_airflow_api`), asked at
  ``/sleeper/api/v1/tables/t/records?key=K`` with ``Authorization: Bearer <token>``, the
  token got as a user gets it (``POST /auth/token``);
* ``bare``: the REST app alone (:func:`sleeper_ops.web.rest.create_app` over
  :class:`~sleeper_ops.web.rest.LazySleeper`, without Airflow's authentication) with
  uvicorn in a child process: the same-run baseline of what Airflow adds.

It times, interleaved (the HTTP legs taking turns to go first), ``--queries`` lookups each
way of keys known to exist: a REST one whole (request sent, body read and parsed), the
in-process one through this process's own Sleeper over the same home. Every REST answer
is checked by content against the in-process answer for its key (records equal, count,
not truncated); a mismatch exits non-zero. ``--runs`` runs; the figure of merit is the
p50 through Airflow (goal: at most 3 ms), with its ratios to the bare app and to in
process of the same run, each printed as the median over the runs and its spread, with
the load average before and after. ``--against OTHER_CHECKOUT`` adds an Airflow leg and
a bare app served by another checkout's code (before and after in one run).

    .venv/bin/python bench/rest_query.py [--rows 1000000] [--queries 500] [--runs 3] [--through both|airflow|bare]
        [--against OTHER_CHECKOUT]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import _common  # noqa: F401
from _common import parse_args, percentiles, spread, stop_embedded
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


@dataclass
class Leg:
    """One way of asking over HTTP: a keep-alive connection, a path prefix and headers."""

    label: str
    conn: http.client.HTTPConnection
    prefix: str = ""
    headers: dict[str, str] = field(default_factory=dict)

    def lookup(self, key: str) -> Any:
        self.conn.request("GET", f"{self.prefix}/tables/{TABLE}/records?"
                          + urllib.parse.urlencode({"key": json.dumps(key)}), headers=self.headers)
        r = self.conn.getresponse()
        body = r.read()
        if r.status != 200:
            sys.exit(f"{self.label}: GET records?key={key!r} answered {r.status}: {body[:500]!r}")
        return json.loads(body)


def one_run(legs: dict[str, Leg], table: Any, keys: list[str], queries: int,
            rng: random.Random) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {name: [] for name in (*legs, "local")}
    names = list(legs)
    for i in range(queries):
        key = rng.choice(keys)
        got = {}
        for name in names[i % len(names):] + names[:i % len(names)]:  # no leg always goes first
            leg = legs[name]
            t0 = time.perf_counter()
            got[name] = leg.lookup(key)
            times[name].append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        want = table.query(keys=[key])
        times["local"].append((time.perf_counter() - t0) * 1000)
        rows = want.to_pylist()
        for name, answer in got.items():
            if not rows or answer != {"records": rows, "count": len(rows), "truncated": False}:
                sys.exit(f"{legs[name].label} answered {str(answer)[:500]} for key {key!r}; in process: {rows[:5]}")
    return {name: percentiles(xs) for name, xs in times.items()}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def bare_app(home: Path, checkout: Optional[Path] = None) -> Iterator[Leg]:
    """The REST app alone, served by uvicorn in a child process (with ``checkout``, that
    checkout's code)."""
    port = free_port()
    env = {**os.environ, "SLEEPER_HOME": str(home)}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout / "plugins"), str(checkout)])
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(home), str(port)], env=env)
    try:
        wait_ready(port, server)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        yield Leg("REST GET /records?key= (HTTP, keep-alive)" if checkout is None
                  else f"the bare app, {checkout.name}", conn)
        conn.close()
    finally:
        server.terminate()
        server.wait(30)


@contextlib.contextmanager
def through_airflow(home: Path, state_dsn: str, checkout: Optional[Path] = None) -> Iterator[Leg]:
    """The REST API in a real ``airflow api-server``, asked with a user's token; with
    ``checkout``, that checkout's code serves it."""
    from _airflow_api import airflow_api_server

    with airflow_api_server(home, state_dsn, checkout=checkout) as api:
        conn = http.client.HTTPConnection(api.host, api.port, timeout=60)
        label = "through Airflow's API server (Bearer token)" if checkout is None else f"the same, {checkout.name}"
        yield Leg(label, conn, "/sleeper/api/v1", {"Authorization": f"Bearer {api.token}"})
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=500, help="lookups each way per run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--through", choices=("both", "airflow", "bare"), default="both",
                    help="serve the REST API through Airflow's API server, the bare app, or both (default)")
    ap.add_argument("--against", type=Path, help="another checkout whose code serves a second Airflow leg and "
                                                 "bare app (before/after in one run)")
    ap.add_argument("--serve", nargs=2, metavar=("HOME", "PORT"), help=argparse.SUPPRESS)
    args = parse_args(ap, rows=20_000, queries=20, runs=2)
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    with tempfile.TemporaryDirectory(prefix="sleeper-bench-rest-") as d:
        home = Path(d)
        sleeper, keys = build(home, args.rows)
        try:
            with contextlib.ExitStack() as stack:
                legs: dict[str, Leg] = {}
                if args.through in ("both", "airflow"):
                    legs["airflow"] = stack.enter_context(through_airflow(home, sleeper.state_store.dsn))
                if args.against is not None:
                    legs["against"] = stack.enter_context(through_airflow(home, sleeper.state_store.dsn,
                                                                          args.against.resolve()))
                if args.through in ("both", "bare"):
                    legs["bare"] = stack.enter_context(bare_app(home))
                    if args.against is not None:
                        legs["bare_against"] = stack.enter_context(bare_app(home, args.against.resolve()))
                table = sleeper.table(TABLE)
                rng = random.Random(24)
                one_run(legs, table, keys, 20, rng)  # warm: connections, footers, every metadata copy
                load_before = load_average()
                runs = [one_run(legs, table, keys, args.queries, rng) for _ in range(args.runs)]
                load_after = load_average()
        finally:
            sleeper.close()
            stop_embedded(home)
    print(f"exact-key lookups, {args.rows:,} rows, {args.queries} each way per run, {args.runs} runs "
          f"(median over runs, spread); load average {load_before} before, {load_after} after:")
    for name, leg in legs.items():
        print(f"  {leg.label:<46} p50 {spread([r[name]['p50'] for r in runs])} ms  "
              f"p99 {spread([r[name]['p99'] for r in runs])} ms")
    print(f"  {'in process Table.query':<46} p50 {spread([r['local']['p50'] for r in runs])} ms  "
          f"p99 {spread([r['local']['p99'] for r in runs])} ms")

    def ratios(label: str, a: str, b: str) -> None:
        print(f"  ratio {label}: p50 {spread([r[a]['p50'] / r[b]['p50'] for r in runs])}  "
              f"p99 {spread([r[a]['p99'] / r[b]['p99'] for r in runs])}")
    if "airflow" in legs:
        ratios("Airflow / in process", "airflow", "local")
    if "airflow" in legs and "bare" in legs:
        ratios("Airflow / bare app", "airflow", "bare")
    if "airflow" in legs and "against" in legs:
        ratios(f"Airflow / Airflow with {args.against.name}", "airflow", "against")
    if "bare" in legs:
        ratios("REST / in process", "bare", "local")
    if "bare_against" in legs:
        ratios(f"bare app / bare app with {args.against.name}", "bare", "bare_against")
    print("  [goal: p50 through Airflow <= 3 ms]")


if __name__ == "__main__":
    main()
