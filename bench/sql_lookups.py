"""``Sleeper.sql`` key lookups: the scan's filter skipped where the key regions hold it,
against the same statements with the filter applied, in one run.

A table of Sleeper's system-test schema, 16 leaves, ``--rows`` rows in 10 appends
compacted to one file a leaf (as ``bench/peers.py`` builds it), on the embedded
PostgreSQL. Each query is asked both ways, the order alternating:

* ``skip`` (as shipped): ``SELECT * FROM t WHERE key = '...'`` (and a range
  ``key >= a AND key < b`` of about 1,000 rows); the table is scanned once with key
  predicates only, so its regions hold exactly the rows the filter accepts and the scan
  does not filter them again (:meth:`sleeper_ops.query.sql.SleeperDataset.filter_held_by_regions`);
* ``filter``: the same statement with that check answering no, so each batch goes
  through the pushed filter (pyarrow's Acero), as before the change.

Every answer is checked against ``Table.query`` of the same key or range. Prints, per
kind, the p50 of each way as the median over ``--runs`` runs (with the spread), and
their ratio within each run.

    .venv/bin/python bench/sql_lookups.py [--rows 2000000] [--queries 300] [--runs 3]
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any, Callable

import _common  # noqa: F401  (sets sys.path)
from _common import bench_sleeper, parse_args, percentiles, spread

from sleeper_ops.demo import KEY_SPACE, SYSTEM_TEST_SCHEMA, generate_rows, split_points
from sleeper_ops.query import sql as sql_module

WAYS = ("skip", "filter")


def one_run(s: Any, statements: list[tuple[str, Callable[[], Any]]]) -> dict[str, float]:
    """The p50 of each way over ``statements`` (each with its expected answer's maker)."""
    shipped = sql_module.SleeperDataset.filter_held_by_regions
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    try:
        for i, (text, expected) in enumerate(statements):
            want = sorted(map(str, expected().to_pylist()))
            for way in WAYS if i % 2 else reversed(WAYS):
                sql_module.SleeperDataset.filter_held_by_regions = (  # type: ignore[method-assign]
                    shipped if way == "skip" else (lambda self: False))
                t0 = time.perf_counter()
                got = s.sql(text)
                times[way].append((time.perf_counter() - t0) * 1000)
                if sorted(map(str, got.to_pylist())) != want:
                    raise SystemExit(f"{way}: {text} answered {got.num_rows} rows, not the query's {len(want)}")
    finally:
        sql_module.SleeperDataset.filter_held_by_regions = shipped  # type: ignore[method-assign]
    return {w: percentiles(times[w])["p50"] for w in WAYS}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--runs", type=int, default=3)
    args = parse_args(ap, rows=20_000, queries=10, runs=2)
    with bench_sleeper("postgres") as (s, _):
        t = s.create_table("t", SYSTEM_TEST_SCHEMA, split_points=split_points(15))
        appends = 10
        keys: list[str] = []
        for i in range(appends):
            data = generate_rows(args.rows // appends, seed=40 + i)
            keys += data.column("key").to_pylist()[::997]
            t.ingest(data)
        while len(t.state().references) > 16:
            t.compact(runner="local")
        rng = random.Random(9)
        width = KEY_SPACE * 1000 // args.rows
        exact = [(f"SELECT * FROM t WHERE key = '{k}'", lambda k=k: t.query(keys=[k]))
                 for k in (rng.choice(keys) for _ in range(args.queries))]
        ranges = []
        for lo in (rng.randrange(0, KEY_SPACE - width) for _ in range(args.queries)):
            a, b = f"key-{lo:09d}", f"key-{lo + width:09d}"
            ranges.append((f"SELECT * FROM t WHERE key >= '{a}' AND key < '{b}'",
                           lambda a=a, b=b: t.query(ranges=[(a, b)])))
        one_run(s, exact[:10] + ranges[:10])  # warm: footers, the metadata copy
        runs = [(one_run(s, exact), one_run(s, ranges)) for _ in range(args.runs)]
    print(f"Sleeper.sql lookups, {args.rows:,} rows, 16 leaves, {args.queries} statements a kind each way, "
          f"{args.runs} runs (median over runs, spread; ms)")
    for n, kind in enumerate(("exact key", "range ~1,000 rows")):
        skip = [r[n]["skip"] for r in runs]
        applied = [r[n]["filter"] for r in runs]
        print(f"  {kind:<18} p50 skip {spread(skip)}  filter {spread(applied)}  "
              f"ratio skip / filter {spread([a / b for a, b in zip(skip, applied)])}")


if __name__ == "__main__":
    main()
