"""As-of reads (issue 22): what rebuilding a table's state as of an earlier transaction
costs against reading its current state, and what keeping the history costs a commit
(not a pass/fail test).

PostgreSQL (embedded). A table of 16 leaves with ``--refs`` references in one AddFiles,
then ``--commits`` compactions (each an AssignJobIds and a ReplaceFileReferences of 3
inputs into 1 output: 2 transactions). Then, each the median of ``--reps`` reads:

(a) the query path's current read: its cached metadata brought up to date when nothing
    changed (one small round trip, ``changes_since``);
(b) a whole current state (``load_state``);
(c) the state as of the newest transaction, as of half the compactions back, and as of
    before them all (``state_as_of``: the current state and the undo records since).

And the commit cost of the history row: a small compaction commit and an AddFiles of
``--refs`` files, with and without the history row (written by every commit; turned off
here by replacing the function that writes it).

(a)-(e) read no file: an as-of query reads its files as a current query does; only the
metadata read differs. (f) is the whole query, ``Table.query(keys=[k])`` against
``Table.query(keys=[k], as_of=N)``, on a table of ``--rows`` rows in 16 leaves,
compacted after a delete of half its records.

    .venv/bin/python bench/as_of.py [--refs 100000] [--commits 500] [--reps 5] [--rows 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any, Callable

import _common  # noqa: F401
from _common import parse_args
from _statestore_common import add_files, new_table

from statestore.transactions import AssignJobIds, JobAssignment, ReplaceFileReferences


def _median(fn: Callable[[], Any], reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _compact(store: Any, tid: str, refs: list[Any], out: str) -> None:
    inputs, refs[:3] = refs[:3], []
    pid = inputs[0].partition_id
    same = [r for r in inputs if r.partition_id == pid]
    job = uuid.uuid4().hex
    store.commit(tid, AssignJobIds((JobAssignment(job, pid, tuple(r.filename for r in same)),)))
    from statestore.files import FileReference

    store.commit(tid, ReplaceFileReferences(job, pid, tuple(r.filename for r in same),
                                            FileReference(out, pid, 1000 * len(same))))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--refs", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=500)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = parse_args(ap, refs=2_000, commits=10, reps=2, rows=20_000)

    from _common import bench_sleeper

    import statestore.postgres.commits as commits
    from sleeper_ops.query.metadata import TableMetadata

    with bench_sleeper("postgres") as (s, _):
        store = s.state_store
        tid, leaves = new_table(store, 16)
        refs = sorted(add_files(store, tid, leaves, args.refs, "a"), key=lambda r: r.partition_id)
        before_all = store.transaction_number(tid)
        marks = []
        for i in range(args.commits):
            _compact(store, tid, refs, f"c/{i}.parquet")
            marks.append(store.transaction_number(tid))
        meta = TableMetadata(store, tid)
        meta.plan(lambda m: None)
        current = _median(lambda: meta.plan(lambda m: None), args.reps * 4)
        whole = _median(lambda: store.load_state(tid), args.reps)
        print(f"PostgreSQL, {args.refs:,} references, then {args.commits:,} compactions "
              f"({2 * args.commits:,} transactions)")
        print(f"(a) current read, query path (cached metadata, unchanged): {current * 1000:.2f} ms")
        print(f"(b) current read, whole state (load_state):                {whole * 1000:.1f} ms")
        for label, number, back in (("newest", marks[-1], 0), ("half back", marks[len(marks) // 2 - 1],
                                                                2 * (args.commits - len(marks) // 2)),
                                    ("before all", before_all, 2 * args.commits)):
            t = _median(lambda number=number: store.state_as_of(tid, number), args.reps)  # type: ignore[misc]
            print(f"(c) as of {label:10} ({back:,} transactions back): {t * 1000:.1f} ms "
                  f"= {t / whole:.2f} x (b)")

        # with and without the history row in turns, so both see the same machine
        small: dict[bool, list[float]] = {True: [], False: []}
        big: dict[bool, list[float]] = {True: [], False: []}
        real = commits.log_history
        try:
            for i in range(args.reps * 4):
                for logged in (True, False):
                    commits.log_history = real if logged else (lambda *a, **k: None)  # type: ignore[assignment]
                    small[logged].append(_median(lambda: _compact(store, tid, refs, f"s/{uuid.uuid4().hex}"), 1))
                    if i < 2:
                        big[logged].append(_median(lambda: add_files(store, tid, leaves, args.refs,
                                                                     uuid.uuid4().hex), 1))
        finally:
            commits.log_history = real
        small_with, small_without = statistics.median(small[True]), statistics.median(small[False])
        big_with, big_without = statistics.median(big[True]), statistics.median(big[False])
        print(f"(d) small compaction (2 commits): {small_with * 1000:.1f} ms with history, "
              f"{small_without * 1000:.1f} ms without: ratio {small_with / small_without:.2f}")
        print(f"(e) AddFiles of {args.refs:,} files: {big_with:.2f} s with history, {big_without:.2f} s without: "
              f"ratio {big_with / big_without:.2f}")
        _query(s, args.rows, args.reps)


def _query(s: Any, rows: int, reps: int) -> None:
    """(f) an exact-key query of a real table (16 leaves, compacted after a delete),
    through ``Table.query``, now and as of before the delete."""
    import random

    from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points

    t = s.create_table("asof", SYSTEM_TEST_SCHEMA, split_points=split_points(15),
                       properties={"sleeper.table.delete.purge.hours": "0"})
    data = generate_rows(rows, seed=7)
    t.ingest(data)
    before = t.history(1)[0].number
    keys = data.column("key").to_pylist()
    t.delete(ranges=[(min(keys), max(keys))], where="timestamp % 2 = 0")
    t.compact(runner="local")
    rng = random.Random(1)
    probe = [rng.choice(keys) for _ in range(reps * 20)]
    t.query(keys=[probe[0]])
    t.query(keys=[probe[0]], as_of=before)
    now = statistics.median([_median(lambda k=k: t.query(keys=[k]), 1) for k in probe])  # type: ignore[misc]
    old = statistics.median([_median(lambda k=k: t.query(keys=[k], as_of=before), 1)  # type: ignore[misc]
                             for k in probe])
    print(f"(f) exact-key query, {rows:,} rows in 16 leaves: p50 {now * 1000:.2f} ms now, "
          f"{old * 1000:.2f} ms as of before the delete: ratio {old / now:.1f}")


if __name__ == "__main__":
    main()
