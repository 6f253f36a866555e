"""Randomised interleavings of ingest, compaction, splitting and garbage collection.

After every step: each ingested record is returned by a full-range query exactly
once (no aggregation iterator), a random range query equals a plain Python filter
of what was ingested, every file reference points at a live object, and every
tracked file exists. The seed is in the test id, so a failure can be replayed.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore
from tests.aging import age_files

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "id", "type": "LongType"}]}
PROPS = {"sleeper.table.partition.splitting.threshold": "3000",
         "sleeper.table.compaction.strategy": "basic",
         "sleeper.table.compaction.files.batch.size": "3",
         "sleeper.table.parquet.rowgroup.rows.max": "500"}


def _batch(rng: np.random.Generator, n: int, first_id: int) -> pa.Table:
    keys = [f"k{v:05d}" for v in rng.integers(0, 20_000, n)]
    return pa.table({"key": pa.array(keys, pa.string()), "ts": pa.array(rng.integers(0, 10, n), pa.int64()),
                     "id": pa.array(np.arange(first_id, first_id + n), pa.int64())})


def _check(t, sleeper: Sleeper, ingested: dict[int, str], rnd: random.Random, step: str) -> None:
    everything = t.query(ranges=[("", None)])
    ids = Counter(everything.column("id").to_pylist())
    dupes = [i for i, n in ids.items() if n > 1]
    assert not dupes, f"after {step}: records returned twice: {dupes[:5]}"
    missing = set(ingested) - set(ids)
    assert not missing, f"after {step}: {len(missing)} records lost, e.g. {sorted(missing)[:5]}"
    assert len(ids) == len(ingested), f"after {step}: unknown records appeared"
    lo, hi = sorted(f"k{rnd.randrange(20_000):05d}" for _ in range(2))
    got = sorted(t.query(ranges=[(lo, hi)]).column("id").to_pylist())
    assert got == sorted(i for i, k in ingested.items() if lo <= k < hi), f"after {step}: range [{lo}, {hi})"
    state = t.state()
    for ref in state.references.values():
        assert sleeper.objects.head(ref.filename) is not None, f"after {step}: {ref.filename} is referenced but gone"
    for name in state.files:
        assert sleeper.objects.head(name) is not None, f"after {step}: tracked file {name} is gone"
    for ref in state.references.values():
        assert state.partitions[ref.partition_id] is not None


def _run(sleeper: Sleeper, seed: int, steps: int) -> None:
    rnd = random.Random(seed)
    rng = np.random.default_rng(seed)
    t = sleeper.create_table("t", SCHEMA, split_points=["k10000"], properties=PROPS)
    ingested: dict[int, str] = {}
    next_id = 0
    log = []
    for _ in range(steps):
        op = rnd.choice(["ingest", "ingest", "compact", "split", "gc"])
        if op == "ingest":
            batch = _batch(rng, rnd.randrange(200, 2500), next_id)
            next_id += batch.num_rows
            t.ingest(batch)
            ingested.update(zip(batch.column("id").to_pylist(), batch.column("key").to_pylist()))
        elif op == "compact":
            report = t.compact(max_workers=2)
            assert report.count("failed") == 0, report.summary()
        elif op == "split":
            t.split()
        else:
            age_files(sleeper.state_store, t.info.table_id)
            t.gc()
        log.append(op)
        _check(t, sleeper, ingested, rnd, " -> ".join(log[-6:]))
    # Drive the tree to rest: everything pushed to leaves, compacted, collected.
    for _ in range(6):
        t.split()
        t.compact()
        age_files(sleeper.state_store, t.info.table_id)
        t.gc()
    _check(t, sleeper, ingested, rnd, "final maintenance")
    state = t.state()
    assert all(state.partitions[r.partition_id].is_leaf for r in state.references.values()), \
        "repeated compaction pushes every reference down to a leaf"
    assert not [f for f in state.files if state.reference_count(f) == 0], "GC with no delay leaves nothing behind"
    assert len(state.partitions) > 3, "the table split as it grew"


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_interleaving_in_memory(tmp_path, seed):
    with Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run(s, seed, steps=25)


@pytest.mark.integration
def test_random_interleaving_on_postgres(tmp_path, pg_dsn):
    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(str(tmp_path / "data"))) as s:
        _run(s, 7, steps=25)


@pytest.mark.integration
def test_ingest_compaction_splitting_and_gc_in_concurrent_threads_on_postgres(tmp_path, pg_dsn):
    """Issue 9 item 7: the interleavings above run maintenance one step at a time, so GC
    never raced a commit. Here four threads ingest, compact, split and collect garbage
    at once (GC judging ages three hours ahead, so it deletes unreferenced files and
    sweeps every untracked object as soon as it may); every record ends up stored once."""
    import threading
    import time

    from statestore.postgres import PostgresStateStore

    with Sleeper(state_store=PostgresStateStore(pg_dsn, max_connections=8),
                 objects=ObjectStore(str(tmp_path / "data"))) as s:
        t = s.create_table("t", SCHEMA, split_points=["k10000"], properties=PROPS)
        rng = np.random.default_rng(11)
        batches = [_batch(rng, 1500, i * 1500) for i in range(16)]
        done = threading.Event()
        errors: list[BaseException] = []

        def loop(step) -> None:
            try:
                while not done.is_set():
                    step()
            except BaseException as e:  # reported by the test
                errors.append(e)

        def ingest() -> None:
            try:
                for b in batches:
                    t.ingest(b)
            except BaseException as e:
                errors.append(e)
            finally:
                done.set()

        def gc() -> None:
            s.table("t").gc(now_ms=int(time.time() * 1000) + 3 * 3600_000)

        threads = [threading.Thread(target=ingest),
                   threading.Thread(target=loop, args=(lambda: s.table("t").compact(max_workers=2),)),
                   threading.Thread(target=loop, args=(lambda: s.table("t").split(),)),
                   threading.Thread(target=loop, args=(gc,))]
        for th in threads:
            th.start()
        for th in threads:
            th.join(300)
        assert not errors, errors
        ingested = {i: k for b in batches for i, k in zip(b.column("id").to_pylist(), b.column("key").to_pylist())}
        # settle: compaction jobs' outputs all committed, then check as the sequential test does
        for _ in range(3):
            t.compact()
        _check(t, s, ingested, random.Random(5), "concurrent maintenance")
        assert len(ingested) == 24_000
