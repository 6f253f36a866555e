"""Object-store cost: the S3 requests an ingest, a compaction and a lookup make.

A table on S3 (moto's server in this process, behind a proxy that logs every request:
``tests/faults/aws_proxy.py`` with no fault injected) over the in-memory state store,
so every request counted is a data-file request. Sleeper's system-test schema, 16 leaf
partitions. The bench ingests ``--rows`` rows in ``--ingests`` ingests, compacts every
leaf to one file, then looks up keys known to exist:

* warm lookups before compaction (each leaf holding one file per ingest, each spanning
  the leaf's keys): a runner that has read every file's footer, ``--lookups`` keys;
* a cold lookup: a new query runner with an empty footer cache (a new process's first
  lookup of a file), one per leaf;
* warm lookups: the same runner again, ``--lookups`` keys, after one lookup per leaf.

Each phase prints its requests by HTTP method (and S3's per-1,000-requests prices make
GET and PUT the ones that cost); lookups print requests per lookup. Every lookup's
answer is checked to hold its key. Goals (issue 24): a warm exact-key lookup makes at
most 1 GET, a cold one at most 3.

    .venv/bin/python bench/s3_requests.py [--rows 400000] [--ingests 4] [--lookups 200]
"""

from __future__ import annotations

import argparse
import collections
import random
import socket
import time
from typing import Any

import _common  # noqa: F401  (sets sys.path)
from _common import parse_args

from sleeper_ops.api import Sleeper
from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.io.datafile import ParquetFileCache
from sleeper_ops.io.storage import ObjectStore, S3Options
from sleeper_ops.query.runner import QueryRunner, exact_key_region
from statestore.memory import InMemoryStateStore
from tests.faults.aws_proxy import FaultProxy

KEYS = {"access_key": "test", "secret_key": "test", "region": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Phase:
    """The requests the proxy logged while a ``with`` block ran, by method."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.proxy = proxy
        self.by_method: collections.Counter[str] = collections.Counter()

    def __enter__(self) -> Phase:
        self._start = len(self.proxy.log)
        return self

    def __exit__(self, *exc: object) -> None:
        self.by_method = collections.Counter(method for method, _ in self.proxy.log[self._start:])

    @property
    def total(self) -> int:
        return sum(self.by_method.values())

    def cells(self, per: int = 1) -> str:
        return "  ".join(f"{m} {self.by_method[m] / per:,.2f}" if per > 1 else f"{m} {self.by_method[m]:,}"
                         for m in sorted(self.by_method)) or "none"


def lookups(runner: QueryRunner, schema: Any, keys: list[str]) -> None:
    for k in keys:
        got = runner.query([exact_key_region(schema, [k])])
        if k not in got.column("key").to_pylist():
            raise SystemExit(f"a lookup of {k!r} did not return it")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--ingests", type=int, default=4)
    ap.add_argument("--lookups", type=int, default=200)
    args = parse_args(ap, rows=4_000, ingests=2, lookups=20)
    import logging

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise

    port = _free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    moto.start()
    try:
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name=KEYS["region"],
                     aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket="bench")
        with FaultProxy(f"http://127.0.0.1:{port}") as proxy:
            s3 = S3Options(endpoint_override=proxy.url, scheme="http", **KEYS)
            run(proxy, Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore("s3://bench/data", s3)), args)
    finally:
        moto.stop()


def run(proxy: FaultProxy, s: Sleeper, args: argparse.Namespace) -> None:
    leaves = 16
    t = s.create_table("s3", SYSTEM_TEST_SCHEMA, split_points=split_points(leaves - 1),
                       properties={"sleeper.table.compaction.strategy": "basic"})
    keys: list[str] = []
    with Phase(proxy) as ingest:
        t0 = time.perf_counter()
        for i in range(args.ingests):
            data = generate_rows(args.rows // args.ingests, seed=i)
            keys += data.column("key").to_pylist()[::97]
            t.ingest(data)
        took = time.perf_counter() - t0
    files = len(t.state().references)
    print(f"S3 requests (moto behind a logging proxy), {args.rows:,} rows of the system-test schema, {leaves} leaves")
    print(f"  ingest: {args.ingests} ingests writing {files} files in {took:.1f} s: {ingest.total:,} requests "
          f"({ingest.cells()}); {ingest.total / files:.1f} per file written")
    # before compaction: each leaf holds one file per ingest, each spanning the leaf's keys
    fresh = QueryRunner(s.state_store, s.objects, t.info, cache=ParquetFileCache())
    fresh_keys = [random.Random(11).choice(keys) for _ in range(args.lookups)]
    lookups(fresh, t.schema, fresh_keys[:leaves])  # warm: every file's footer (and filters) read once
    with Phase(proxy) as before:
        lookups(fresh, t.schema, fresh_keys)
    fresh.close()
    print(f"  warm exact-key lookup before compaction ({files // leaves} files a leaf, {len(fresh_keys)}): "
          f"{before.total / len(fresh_keys):.2f} requests per lookup ({before.cells(len(fresh_keys))}) "
          f"[the Bloom filters probed in memory: 1 GET, not one a file]")
    with Phase(proxy) as compact:
        while len(t.state().references) > leaves:
            t.compact(runner="local")
    out = len(t.state().references)
    print(f"  compaction: {files} files into {out}: {compact.total:,} requests ({compact.cells()}); "
          f"{compact.total / files:.1f} per input file")

    rng = random.Random(7)
    leaves_now = [p for p in t.state().partitions.values() if p.is_leaf]
    by_leaf: dict[str, str] = {}
    for k in keys:
        by_leaf.setdefault(_leaf_of(leaves_now, k), k)
    cold_keys = list(by_leaf.values())
    info = t.info
    with Phase(proxy) as cold:
        runner = QueryRunner(s.state_store, s.objects, info, cache=ParquetFileCache())
        lookups(runner, t.schema, cold_keys)
    warm_keys = [rng.choice(keys) for _ in range(args.lookups)]
    with Phase(proxy) as warm:
        lookups(runner, t.schema, warm_keys)
    runner.close()
    print(f"  cold exact-key lookup (new runner, empty footer cache, one per leaf, {len(cold_keys)}): "
          f"{cold.total / len(cold_keys):.2f} requests per lookup ({cold.cells(len(cold_keys))}) [goal: <= 3 GET]")
    print(f"  warm exact-key lookup ({len(warm_keys)}): {warm.total / len(warm_keys):.2f} requests per lookup "
          f"({warm.cells(len(warm_keys))}) [goal: <= 1 GET]")
    s.close()


def _leaf_of(leaves: list[Any], key: str) -> str:
    """The id of the leaf partition (of ``leaves``) holding ``key``."""
    for p in leaves:
        if p.region.ranges[0].contains(key):
            return str(p.id)
    raise SystemExit(f"no leaf holds {key!r}")


if __name__ == "__main__":
    main()
