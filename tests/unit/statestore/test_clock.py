"""One wall clock (``statestore.clock``): the system's by default, a manual one in tests,
read by every "now in milliseconds" of the library."""

from __future__ import annotations

import time

import pytest

from statestore.clock import ManualClock, SystemClock, now_ms, use_clock
from statestore.jobs import JobRecord
from statestore.memory import InMemoryStateStore


def test_the_clock_is_the_system_clock_by_default():
    before = int(time.time() * 1000)
    assert before <= now_ms() <= int(time.time() * 1000)
    assert before <= SystemClock().now_ms() <= int(time.time() * 1000)


def test_a_manual_clock_stands_still_until_moved():
    clock = ManualClock(1_000)
    assert clock.now_ms() == clock.now_ms() == 1_000
    assert clock.advance(500) == 1_500
    clock.set(200)
    assert clock.now_ms() == 200


def test_use_clock_sets_the_time_of_the_library_until_the_block_ends():
    with use_clock(ManualClock(1_700_000_000_000)) as clock:
        assert now_ms() == 1_700_000_000_000
        assert JobRecord.created("t", "j", "compaction").created_ms == 1_700_000_000_000
        clock.advance(60_000)
        assert now_ms() == 1_700_000_060_000
    assert abs(now_ms() - time.time() * 1000) < 60_000


def test_use_clock_restores_the_previous_clock_when_the_block_raises():
    with pytest.raises(RuntimeError):
        with use_clock(ManualClock(5)):
            raise RuntimeError("boom")
    assert now_ms() > 5


def test_a_lease_expires_by_the_clock_in_use():
    store = InMemoryStateStore()
    with use_clock(ManualClock(1_000_000)) as clock:
        lease = store.acquire_lease("t/gc", "run-a", ttl_seconds=60)
        assert lease is not None and lease.expires_ms == 1_060_000
        assert store.acquire_lease("t/gc", "run-b", ttl_seconds=60) is None
        clock.advance(60_001)
        assert store.get_lease("t/gc") is None
        assert store.acquire_lease("t/gc", "run-b", ttl_seconds=60) is not None
