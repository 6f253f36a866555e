"""The write buffer under faults, over PostgreSQL (issue 13, DESIGN.md section 10): four
processes write (the second half of their writes while another flushes again and again), a flush is SIGKILLed after
writing its files, just before its commit, and a flush loop is SIGKILLed at a random
(seeded) moment of its flushing. Afterwards every written record is
returned exactly once, before and after a final flush; the killed flush's files were
never referenced and the orphan sweep deletes them once its job counts as abandoned."""

from __future__ import annotations

import multiprocessing
import random
import time
from collections import Counter
from pathlib import Path

import pytest

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.clock import now_ms
from statestore.postgres import PostgresStateStore
from tests.integration import write_buffer_workers as workers

pytestmark = pytest.mark.integration

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "LongType"}], "valueFields": [{"name": "v", "type": "StringType"}]}
WRITERS, WRITES = 4, 40
#: seeds the moment the flush loop is killed; a failure names it
SEED = 19


def _results(queue: "multiprocessing.Queue[tuple]", n: int) -> list[tuple]:
    out = [queue.get(timeout=120) for _ in range(n)]
    errors = [r for r in out if r[0] != "ok"]
    assert not errors, "a worker failed:\n" + "\n".join(str(e[2]) for e in errors)
    return out


def test_writers_racing_flushes_and_a_killed_flush_leave_every_record_exactly_once(pg_dsn: str,
                                                                                     tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(data)) as s:
        s.create_table("w", SCHEMA, split_points=[1_000_000, 2_000_000, 3_000_000],
                       properties={"sleeper.table.write.buffer.flush.records": "3000"})
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    stop, at_commit, second_half = ctx.Event(), ctx.Event(), ctx.Event()
    victim = ctx.Process(target=workers.flush_hanging_at_commit, args=(pg_dsn, data, "w", at_commit))
    victim.start()
    writers = [ctx.Process(target=workers.writer, args=(pg_dsn, data, "w", w, WRITES, results, second_half))
               for w in range(WRITERS)]
    for p in writers:
        p.start()
    assert at_commit.wait(120), "the victim flush never reached its commit"
    victim.kill()  # SIGKILL: its files are written, its commit never sent
    victim.join(30)
    assert victim.exitcode == -9
    flushing, never = ctx.Event(), ctx.Event()  # (held here: an event must outlive the child's start)
    doomed = ctx.Process(target=workers.flusher, args=(pg_dsn, data, "w", never, results, flushing))
    doomed.start()
    assert flushing.wait(120), "the doomed flush loop never started flushing"
    # past its start-up, it flushes until killed; a seeded delay picks where it is killed:
    # reading the buffer, writing files, committing, or between two flushes
    time.sleep(random.Random(SEED).uniform(0.0, 0.5))
    doomed.kill()
    doomed.join(30)
    assert doomed.exitcode == -9, f"the flush loop was killed while flushing (seed {SEED})"
    loop_flushing = ctx.Event()
    flush_loop = ctx.Process(target=workers.flusher, args=(pg_dsn, data, "w", stop, results, loop_flushing))
    flush_loop.start()
    assert loop_flushing.wait(120), "the flush loop never started flushing"
    second_half.set()  # the writers' second half races the flush loop
    for p in writers:
        p.join(300)
    stop.set()  # the flush loop flushes once more, after every write
    flush_loop.join(120)
    done = _results(results, WRITERS + 1)
    assert [r[2] for r in done if r[1] == "flusher"][0] > 0, "the flush loop flushed records"

    expected = Counter(k for w in range(WRITERS) for k in workers.keys_of(w, WRITES))
    with Sleeper(state_store=PostgresStateStore(pg_dsn), objects=ObjectStore(data)) as s:
        t = s.table("w")
        jobs = t.jobs(kind="flush")
        killed = [j for j in jobs if j.run_id == "test/victim"]
        assert len(killed) == 1 and killed[0].status == "started" and killed[0].outputs
        assert all(s.objects.head(o) is not None for o in killed[0].outputs), "the victim wrote its files"

        def every_key(buffer: bool = True) -> Counter:
            return Counter(t.query(ranges=[(0, None)], buffer=buffer)["key"].to_pylist())

        assert every_key() == expected, "files and buffer"
        assert t.buffer_stats().rows == 0, "the flush loop flushed once more after the last write"
        assert every_key(buffer=False) == expected, "all in files, flushed by the flush loop"
        t.flush()
        assert t.buffer_stats().rows == 0
        assert every_key() == expected, "after the final flush"
        assert every_key(buffer=False) == expected, "all in files now"
        referenced = {r.filename for r in t.state().references.values()}
        assert not referenced & set(killed[0].outputs), "the killed flush's files were never committed"
        assert all(s.objects.head(f) is not None for f in referenced)
        # once the killed job counts as abandoned, the orphan sweep deletes its files
        t.gc(now_ms=now_ms() + 3 * 24 * 3600 * 1000)
        assert all(s.objects.head(o) is None for o in killed[0].outputs if o.endswith(".parquet"))
        assert every_key() == expected
        stray = [o.key for o in s.objects.list(t.info.table_id)
                 if o.key.endswith(".parquet") and o.key not in referenced]
        assert not stray, f"files of killed flushes left behind: {stray[:3]}"


def test_rest_writes_are_durable_when_201_is_returned(server_dir: Path, tmp_path: Path) -> None:
    """PostgreSQL is SIGKILLed right after each 201 (no clean shutdown, no checkpoint)
    and restarted: every acknowledged record is there."""
    import warnings

    with warnings.catch_warnings():
        # Starlette 1.x asks for httpx2 instead of httpx (a warning at import); httpx works.
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient

    from sleeper_ops.web.rest import create_app
    from statestore.postgres import create_database_if_missing
    from tests.faults.killable_postgres import KillablePostgres

    pg = KillablePostgres(server_dir)
    pg.start()
    try:
        create_database_if_missing(pg.dsn, "sleeper")
        data = str(tmp_path / "data")
        acknowledged: list[int] = []
        for round_ in range(3):
            with Sleeper(state_store=PostgresStateStore(pg.dsn_for("sleeper"), connect_timeout=10),
                         objects=ObjectStore(data)) as s:
                if round_ == 0:
                    s.create_table("w", SCHEMA)
                with TestClient(create_app(lambda s=s: s)) as c:
                    keys = list(range(round_ * 100, round_ * 100 + 100))
                    r = c.post("/tables/w/records", json={"records": [{"key": k, "v": "x"} for k in keys]})
                    assert r.status_code == 201, r.text
                    acknowledged += keys
                    pg.kill()  # right after the response
                pg.start()
                got = s.table("w").query(ranges=[(0, None)])["key"].to_pylist()
                assert got == acknowledged
    finally:
        pg.stop()
