"""Write buffer benchmark (issue 13; DESIGN.md section 8), not a pass/fail test.

On an embedded PostgreSQL (or ``--dsn``), in one run:

(a) latency of one write of 1,000 records (an Arrow table; also a list of dicts), p50
    and p99, against a plain autocommit ``INSERT`` of the same IPC bytes into a bare
    table (the baseline);
(b) records/s sustained by 4 writer processes, against 4 processes doing the plain
    INSERT of the same bytes;
(c) flush: records/s moving 1 M buffered records into files (one commit per round);
(d) exact-key query p50 with 100,000 records buffered over p50 with an empty buffer.

Goals: (a) p50 <= 5 ms, p99 <= 20 ms; (b) >= 200,000 records/s; (c) >= 1 M records/s;
(d) ratio <= 1.5.

Usage: ``python bench/write.py [--writes N] [--seconds S] [--dsn DSN]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import time
from typing import Any, Optional

import pyarrow as pa
from _common import bench_sleeper, parse_args, percentiles

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "v", "type": "StringType"}]}
ROWS = 1000
WRITERS = 4


def records(seed: int, n: int = ROWS) -> pa.Table:
    rnd = random.Random(seed)
    keys = [f"k{rnd.randrange(10**8):08d}" for _ in range(n)]
    values = [f"value-{seed}-{i:06d}" for i in range(n)]
    return pa.table({"key": keys, "ts": pa.array(range(n), pa.int64()), "v": values})


def _plain_insert(dsn: str, data: bytes, n: int) -> list[float]:
    import psycopg

    out = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.execute("INSERT INTO bench_plain (data) VALUES (%b)", (data,), prepare=True)
            out.append(time.perf_counter() - t0)
    return out


def _writer(dsn: str, data_dir: str, mode: str, seconds: float, ready: Any, results: Any) -> None:
    """One writer process: connects, waits at ``ready`` until every writer (and the parent)
    is connected, then writes for ``seconds`` and puts its record count in ``results``."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from sleeper_ops import Sleeper
    from sleeper_ops.ingest.buffer import encode
    from sleeper_ops.io.storage import ObjectStore
    from statestore.postgres import PostgresStateStore

    batches = [records(i) for i in range(20)]
    n = 0
    if mode == "plain":
        import psycopg
        data = [encode(b.to_batches()[0]) for b in batches]
        with psycopg.connect(dsn, autocommit=True) as conn:
            ready.wait(120)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                conn.execute("INSERT INTO bench_plain (data) VALUES (%b)", (data[n % 20],), prepare=True)
                n += 1
    else:
        with Sleeper(state_store=PostgresStateStore(dsn, max_connections=1), objects=ObjectStore(data_dir)) as s:
            t = s.table("w")
            t.write(batches[0])  # connect first
            ready.wait(120)
            deadline = time.perf_counter() + seconds
            while time.perf_counter() < deadline:
                t.write(batches[n % 20])
                n += 1
    results.put(n * ROWS)


def concurrent(dsn: str, data_dir: str, mode: str, seconds: float, writers: int = WRITERS) -> float:
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    ready = ctx.Barrier(writers + 1)  # all start writing together, once every one is connected
    procs = [ctx.Process(target=_writer, args=(dsn, data_dir, mode, seconds, ready, results))
             for _ in range(writers)]
    for p in procs:
        p.start()
    ready.wait(120)
    total = sum(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join()
    return total / seconds


def exact_key_p50(t: Any, keys: list[str], n: int = 300, buffer: bool = True) -> float:
    for k in keys[:20]:
        t.query(keys=[k], buffer=buffer)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        t.query(keys=[keys[i % len(keys)]], buffer=buffer)
        out.append(time.perf_counter() - t0)
    return percentiles(out)["p50"]


def run(s: Any, dsn: str, data_dir: str, writes: int, seconds: float, scale: int = 1) -> None:
    """Every figure; ``scale`` divides the sizes of (c) and (d) (``--smoke``: 100, and
    (b) with 1 writer process a side instead of 4)."""
    import psycopg

    from sleeper_ops.ingest.buffer import encode

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_plain (id bigserial PRIMARY KEY, data bytea NOT NULL)")
        conn.execute("ALTER TABLE bench_plain ALTER COLUMN data SET STORAGE EXTERNAL")
    t = s.create_table("w", SCHEMA, split_points=[f"k{i * 10**7:08d}" for i in range(1, 10)],
                       properties={"sleeper.table.write.buffer.max.records": "50000000"})
    batch = records(1)
    dicts = batch.to_pylist()
    data = encode(batch.to_batches()[0])
    for _ in range(20):
        t.write(batch)
    print(f"one write: {ROWS} records, {len(data):,} bytes of Arrow IPC")

    # (a) latency
    ours: list[float] = []
    ours_dicts: list[float] = []
    for _ in range(writes):
        t0 = time.perf_counter()
        t.write(batch)
        ours.append(time.perf_counter() - t0)
    plain = _plain_insert(dsn, data, writes)
    for _ in range(max(50 // scale, writes // 5)):
        t0 = time.perf_counter()
        t.write(dicts)
        ours_dicts.append(time.perf_counter() - t0)
    po, pp, pd = percentiles(ours), percentiles(plain), percentiles(ours_dicts)
    print(f"(a) write of {ROWS} records (Arrow): p50 {po['p50'] * 1e3:.2f} ms  p99 {po['p99'] * 1e3:.2f} ms"
          f"   [goal p50 <= 5, p99 <= 20]")
    print(f"    plain INSERT of the same bytes:  p50 {pp['p50'] * 1e3:.2f} ms  p99 {pp['p99'] * 1e3:.2f} ms"
          f"   ratio p50 {po['p50'] / pp['p50']:.2f}, p99 {po['p99'] / pp['p99']:.2f}")
    print(f"    write of {ROWS} records (list of dicts): p50 {pd['p50'] * 1e3:.2f} ms  p99 {pd['p99'] * 1e3:.2f} ms")

    # (b) 4 writer processes
    writers = WRITERS if scale == 1 else 1
    ours_rate = concurrent(dsn, data_dir, "buffer", seconds, writers)
    plain_rate = concurrent(dsn, data_dir, "plain", seconds, writers)
    plural = "s" if writers > 1 else ""
    print(f"(b) {writers} writer{plural}: {ours_rate:,.0f} records/s [goal >= 200,000]; plain INSERT {plain_rate:,.0f}"
          f" records/s; ratio {ours_rate / plain_rate:.2f}")

    # (c) flush of everything buffered so far, topped up to ~1 M records
    held = t.buffer_stats().rows
    while held < 1_000_000 // scale:
        t.write(records(held))
        held += ROWS
    r = t.flush()
    print(f"(c) flush: {r.records:,} records in {r.seconds:.2f}s = {r.records_per_second:,.0f} records/s"
          f" ({r.rounds} rounds, {r.files} files) [goal >= 1,000,000]")

    # (d) exact-key query p50 on a table of 1 M records (/ scale) in one file per leaf: empty buffer vs 100,000 buffered
    q = s.create_table("q", SCHEMA, split_points=[f"k{i * 10**7:08d}" for i in range(1, 10)])
    q.ingest(pa.concat_tables([records(20_000_000 + i) for i in range(1000 // scale)]))
    keys = q.query(ranges=[("k", None)], buffer=False)["key"].to_pylist()
    sample = random.Random(7).sample(keys, min(200, len(keys)))
    no_buffer = exact_key_p50(q, sample, buffer=False)
    empty = exact_key_p50(q, sample)
    for i in range(100 // scale):
        q.write(records(10_000_000 + i))
    assert q.buffer_stats().rows == 100_000 // scale
    full = exact_key_p50(q, sample)
    print(f"(d) exact-key query p50: empty buffer {empty * 1e3:.2f} ms, 100,000 buffered {full * 1e3:.2f} ms;"
          f" ratio {full / empty:.2f} [goal <= 1.5]; without reading the buffer {no_buffer * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=500, help="writes timed one at a time")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of the concurrent phase")
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: the embedded server of a temporary SLEEPER_HOME)")
    args = parse_args(parser, writes=10, seconds=0.5)
    with bench_sleeper("postgres") as (s, home):
        dsn: Optional[str] = args.dsn or s.state_store.dsn
        assert dsn is not None
        run(s, dsn, str(home / "data"), args.writes, args.seconds, scale=100 if args.smoke else 1)


if __name__ == "__main__":
    main()
