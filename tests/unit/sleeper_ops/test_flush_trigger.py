"""When the flush DAG is asked for by the write buffer: flush_due (pure) and the asset
watcher's trigger, driven by a scripted sequence of buffer stats."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from sleeper_ops.ingest.flush import flush_due
from statestore.buffer import BufferStats

pytest.importorskip("airflow")

from sleeper_ops.airflow.triggers.buffer import BufferThresholdTrigger

NOW = int(time.time() * 1000)  # the trigger measures ages against the clock


def test_flush_is_due_on_records_or_age_and_never_for_an_empty_buffer() -> None:
    due = lambda stats: flush_due(stats, NOW, flush_records=100, flush_age_seconds=60)  # noqa: E731
    assert due(BufferStats()) is None
    assert due(BufferStats(1, 99, NOW - 59_000)) is None
    assert "holds 100 records" in str(due(BufferStats(1, 100, NOW)))
    assert "waited 60s" in str(due(BufferStats(1, 1, NOW - 60_000)))


def _events(trigger: BufferThresholdTrigger, stats: list[BufferStats | Exception], monkeypatch: Any) -> list[dict]:
    """The events the trigger yields while reading ``stats`` one per poll (an exception
    in the list is raised by that poll)."""
    feed = iter(stats)

    def next_stats() -> BufferStats:
        item = next(feed, None)
        if item is None:
            raise asyncio.CancelledError
        if isinstance(item, Exception):
            raise item
        return item
    monkeypatch.setattr(trigger, "_stats", next_stats)
    out: list[dict] = []

    async def collect() -> None:
        try:
            async for event in trigger.run():
                out.append(event.payload)
        except asyncio.CancelledError:
            pass
    asyncio.run(collect())
    return out


def test_the_trigger_fires_once_per_flush_not_on_every_poll(monkeypatch: Any) -> None:
    trigger = BufferThresholdTrigger(table="t", flush_records=100, flush_age_seconds=3600, poll_seconds=0)
    stats = [BufferStats(1, 50, NOW), BufferStats(2, 150, NOW), BufferStats(3, 250, NOW),  # fires once
             BufferStats(1, 20, NOW, flushes=1), BufferStats(2, 120, NOW, flushes=1)]  # flushed; fires again
    events = _events(trigger, stats, monkeypatch)
    assert [(e["table"], e["records"]) for e in events] == [("t", 150), ("t", 120)]
    assert "holds 150 records" in events[0]["reason"]


def test_a_lost_store_is_logged_and_watched_again(monkeypatch: Any) -> None:
    trigger = BufferThresholdTrigger(table="t", flush_records=10, flush_age_seconds=60, poll_seconds=0)
    out = _events(trigger, [OSError("store down"), BufferStats(1, 10, NOW)], monkeypatch)
    assert [e["records"] for e in out] == [10]


def test_a_deleted_table_is_logged_once_and_looked_for_rarely(monkeypatch: Any, caplog: Any) -> None:
    from sleeper_ops.airflow.triggers import buffer
    from statestore.errors import TableNotFoundError

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
    monkeypatch.setattr(buffer.asyncio, "sleep", sleep)
    trigger = BufferThresholdTrigger(table="t", flush_records=10, flush_age_seconds=60, poll_seconds=5)
    gone = TableNotFoundError("table 't' does not exist")
    with caplog.at_level("INFO", logger=buffer.__name__):
        out = _events(trigger, [gone, gone, gone, BufferStats(1, 10, NOW)], monkeypatch)
    assert [e["records"] for e in out] == [10]  # the table came back: watched as before
    assert slept[:3] == [buffer.MISSING_POLL_SECONDS] * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "does not exist" in warnings[0]
    assert any("exists again" in r.getMessage() for r in caplog.records)


def test_the_trigger_keeps_one_sleeper_across_polls_and_opens_another_after_a_failure(monkeypatch: Any) -> None:
    """One state store connection per watcher, not one per poll; a failed poll closes it
    and the next opens a fresh one; the watcher's end closes the last."""
    from sleeper_ops.airflow.hooks import sleeper as hook_module

    opened: list[Any] = []
    reads = iter([BufferStats(1, 1, NOW), OSError("store lost"), BufferStats(1, 2, NOW), BufferStats(1, 3, NOW)])

    class FakeSleeper:
        closed = False

        def table(self, name: str) -> Any:
            assert name == "t"
            return self

        def buffer_stats(self) -> BufferStats:
            item = next(reads, None)
            if item is None:
                raise asyncio.CancelledError
            if isinstance(item, Exception):
                raise item
            return item

        def close(self) -> None:
            self.closed = True

        def __enter__(self) -> FakeSleeper:
            return self

        def __exit__(self, *exc: object) -> None:
            self.close()

    class FakeHook:
        def __init__(self, conn_id: str) -> None:
            assert conn_id == "c"

        def get_conn(self) -> FakeSleeper:
            opened.append(FakeSleeper())
            return opened[-1]
    monkeypatch.setattr(hook_module, "SleeperHook", FakeHook)
    trigger = BufferThresholdTrigger(table="t", flush_records=3, flush_age_seconds=3600, poll_seconds=0,
                                     sleeper_conn_id="c")
    out: list[dict] = []

    async def collect() -> None:
        try:
            async for event in trigger.run():
                out.append(event.payload)
        except asyncio.CancelledError:
            pass
    asyncio.run(collect())
    assert [e["records"] for e in out] == [3]
    assert len(opened) == 2  # 4 polls: one Sleeper before the failure, one after
    assert all(s.closed for s in opened)


def test_the_trigger_serialises_with_its_thresholds() -> None:
    trigger = BufferThresholdTrigger(table="t", flush_records=5, flush_age_seconds=7, sleeper_conn_id="c")
    path, kwargs = trigger.serialize()
    assert path == "sleeper_ops.airflow.triggers.buffer.BufferThresholdTrigger"
    again = BufferThresholdTrigger(**kwargs)
    assert (again.table, again.flush_records, again.flush_age_seconds, again.sleeper_conn_id) == ("t", 5, 7.0, "c")
