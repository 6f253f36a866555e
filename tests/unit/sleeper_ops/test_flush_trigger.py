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
    monkeypatch.setattr(trigger, "_stats", lambda: _next_read(feed))
    return _run(trigger)


def _next_read(feed: Any) -> BufferStats:
    """The next stats of ``feed`` (an exception in it is raised); once it is empty, the
    CancelledError that ends the trigger's run."""
    item = next(feed, None)
    if item is None:
        raise asyncio.CancelledError
    if isinstance(item, BaseException):
        raise item
    return item


def _run(trigger: BufferThresholdTrigger) -> list[dict]:
    """The payloads of the events ``trigger.run()`` yields until it is cancelled."""
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


class _FakeSleeper:
    """A Sleeper whose table ``buffer_stats`` answers from ``reads`` (an exception in it is
    raised by that read)."""

    def __init__(self, reads: Any) -> None:
        self.reads, self.closed = reads, False

    def table(self, name: str) -> Any:
        return self

    def buffer_stats(self) -> BufferStats:
        return _next_read(self.reads)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def opened(monkeypatch: Any) -> Any:
    """Every Sleeper the shared module opens (each a _FakeSleeper reading ``opened.reads``)."""
    from sleeper_ops.airflow.triggers import shared_sleeper

    class Opened(list):  # type: ignore[type-arg]
        reads: Any = iter(())
    out = Opened()

    def open_one(conn_id: str) -> _FakeSleeper:
        assert conn_id == "c"
        out.append(_FakeSleeper(out.reads))
        return out[-1]
    monkeypatch.setattr(shared_sleeper, "_open", open_one)
    yield out
    assert not shared_sleeper._current and not shared_sleeper._triggers  # nothing left open


def test_the_watchers_of_a_process_share_one_sleeper_across_their_polls(opened: Any) -> None:
    """Two tables' watchers polling in turn: one state store connection for both, not one
    per poll or per watcher; a lost store retires it (the next poll opens another); a
    table that does not exist does not; the last watcher's end closes it."""
    from sleeper_ops.airflow.triggers import shared_sleeper
    from statestore.errors import TableNotFoundError

    opened.reads = iter([BufferStats(1, 1, NOW), BufferStats(1, 2, NOW), TableNotFoundError("no table 'b'"),
                         OSError("store lost"), BufferStats(1, 3, NOW), BufferStats(1, 4, NOW)])
    a, b = (BufferThresholdTrigger(table=t, flush_records=9, flush_age_seconds=60, sleeper_conn_id="c")
            for t in "ab")
    shared_sleeper.joined("c")
    shared_sleeper.joined("c")
    assert [a._stats().rows, b._stats().rows] == [1, 2]
    with pytest.raises(TableNotFoundError):
        b._stats()
    assert len(opened) == 1 and not opened[0].closed
    with pytest.raises(OSError):
        a._stats()
    assert opened[0].closed
    assert [a._stats().rows, b._stats().rows] == [3, 4]
    assert len(opened) == 2 and not opened[1].closed
    shared_sleeper.left("c")
    assert not opened[1].closed  # b still watches
    shared_sleeper.left("c")
    assert opened[1].closed


def test_a_shared_sleeper_is_replaced_after_its_time(opened: Any, monkeypatch: Any) -> None:
    from sleeper_ops.airflow.triggers import shared_sleeper

    monkeypatch.setattr(shared_sleeper, "REOPEN_SECONDS", 0.0)
    opened.reads = iter([BufferStats(1, 1, NOW), BufferStats(1, 2, NOW)])
    trigger = BufferThresholdTrigger(table="t", flush_records=9, flush_age_seconds=60, sleeper_conn_id="c")
    shared_sleeper.joined("c")
    trigger._stats()
    trigger._stats()
    assert len(opened) == 2 and opened[0].closed and not opened[1].closed
    shared_sleeper.left("c")
    assert opened[1].closed


def test_a_watcher_run_to_its_end_leaves_nothing_open(opened: Any) -> None:
    opened.reads = iter([BufferStats(1, 1, NOW), BufferStats(1, 3, NOW)])
    trigger = BufferThresholdTrigger(table="t", flush_records=3, flush_age_seconds=3600, poll_seconds=0,
                                     sleeper_conn_id="c")
    assert [e["records"] for e in _run(trigger)] == [3]
    assert len(opened) == 1 and opened[0].closed


def test_the_trigger_serialises_with_its_thresholds() -> None:
    trigger = BufferThresholdTrigger(table="t", flush_records=5, flush_age_seconds=7, sleeper_conn_id="c")
    path, kwargs = trigger.serialize()
    assert path == "sleeper_ops.airflow.triggers.buffer.BufferThresholdTrigger"
    again = BufferThresholdTrigger(**kwargs)
    assert (again.table, again.flush_records, again.flush_age_seconds, again.sleeper_conn_id) == ("t", 5, 7.0, "c")
