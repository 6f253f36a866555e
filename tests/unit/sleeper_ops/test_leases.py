"""The exclusive operation lease: one holder at a time, renewed while held, always released."""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

from sleeper_ops.maintenance.leases import OperationLease, lease_name
from statestore.clock import use_clock
from statestore.errors import LeaseHeldError
from statestore.memory import InMemoryStateStore


@pytest.fixture
def store():
    return InMemoryStateStore()


class Clock:
    """The state store's clock (statestore.clock), in seconds, moved by the test instead of by sleeping."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def now_ms(self) -> int:
        return int(self.now * 1000)

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock():
    with use_clock(Clock()) as c:
        yield c


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_lease_name_is_table_id_and_operation():
    assert lease_name("t1", "compaction") == "t1/compaction"


def test_second_holder_is_refused_naming_the_first(store):
    with OperationLease(store, "t/gc", "run-a"):
        with pytest.raises(LeaseHeldError, match="lease t/gc held by run-a"):
            with OperationLease(store, "t/gc", "run-b"):
                pytest.fail("the body must not run while another holder has the lease")
        assert store.get_lease("t/gc").holder == "run-a"


def test_lease_is_released_after_the_body_and_after_an_error(store):
    with OperationLease(store, "t/gc", "run-a"):
        pass
    assert store.get_lease("t/gc") is None
    with pytest.raises(RuntimeError):
        with OperationLease(store, "t/gc", "run-b"):
            raise RuntimeError("boom")
    assert store.get_lease("t/gc") is None
    with OperationLease(store, "t/gc", "run-c"):
        assert store.get_lease("t/gc").holder == "run-c"


def test_other_operations_and_tables_are_independent(store):
    with OperationLease(store, lease_name("t", "gc"), "a"), OperationLease(store, lease_name("t", "split"), "a"), \
            OperationLease(store, lease_name("u", "gc"), "b"):
        assert store.get_lease("t/gc") and store.get_lease("t/split") and store.get_lease("u/gc")


def test_running_holder_keeps_its_lease_beyond_the_ttl(store, clock):
    with OperationLease(store, "t/compaction", "long-run", ttl_seconds=60, renew_every=0.01) as lease:
        first_expiry = lease.lease.expires_ms
        for step in range(3):  # 3 x 40 s: twice the TTL, renewed in between
            clock.advance(40)
            renewals = lease.renewals
            wait_for(lambda: lease.renewals > renewals + 1, f"a renewal after step {step}")
        assert clock.now * 1000 > first_expiry, "the first TTL has passed"
        with pytest.raises(LeaseHeldError, match="held by long-run"):
            with OperationLease(store, "t/compaction", "other", ttl_seconds=60):
                pass
        assert store.get_lease("t/compaction").expires_ms == clock.now * 1000 + 60_000
        assert not lease.lost


def test_crashed_holders_lease_lapses_after_its_ttl(store, clock):
    # A holder that took the lease and died: no renewals, no release.
    assert store.acquire_lease("t/split", "crashed", 60) is not None
    with pytest.raises(LeaseHeldError, match="crashed"):
        with OperationLease(store, "t/split", "next"):
            pass
    clock.advance(59.9)
    with pytest.raises(LeaseHeldError, match="crashed"):
        with OperationLease(store, "t/split", "next"):
            pass
    clock.advance(0.2)
    with OperationLease(store, "t/split", "next"):
        assert store.get_lease("t/split").holder == "next"


def test_losing_the_lease_is_noticed_and_reported(store):
    lost = []
    with OperationLease(store, "t/gc", "slow", ttl_seconds=60, on_lost=lost.append) as lease:
        # Someone took over (as if this holder had stalled beyond its TTL).
        store.release_lease("t/gc", "slow")
        assert store.acquire_lease("t/gc", "usurper", 60) is not None
        assert lease.renew() is False
        assert lease.lost and lost == [lease]
    # Leaving must not release the usurper's lease.
    assert store.get_lease("t/gc").holder == "usurper"


def test_same_holder_may_reenter(store, clock):
    """A restarted run (same holder) takes over the lease its dead predecessor still holds,
    renewed from now; others stay refused; leaving releases it."""
    first = store.acquire_lease("t/gc", "run-a/1", 60)  # the predecessor, killed while holding it
    clock.advance(30)
    with OperationLease(store, "t/gc", "run-a/1", ttl_seconds=60) as again:
        assert again.lease.holder == "run-a/1"
        assert again.lease.expires_ms == first.expires_ms + 30_000, "renewed from now"
        assert store.get_lease("t/gc").expires_ms == first.expires_ms + 30_000
        with pytest.raises(LeaseHeldError, match="held by run-a/1"):
            with OperationLease(store, "t/gc", "run-b"):
                pass
    assert store.get_lease("t/gc") is None


def test_racing_threads_exactly_one_runs(store):
    contenders = 8
    barrier = threading.Barrier(contenders)
    ran, refused = [], []
    all_refused = threading.Event()

    def contender(i: int) -> None:
        barrier.wait()
        try:
            with OperationLease(store, "t/compaction", f"run-{i}"):
                ran.append(i)
                all_refused.wait(30)  # hold the lease until every other contender was refused
        except LeaseHeldError as e:
            refused.append(str(e))
            if len(refused) == contenders - 1:
                all_refused.set()

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ran) == 1
    assert len(refused) == contenders - 1
    assert all(f"held by run-{ran[0]}" in m for m in refused)


def test_bad_ttl_is_refused(store):
    with pytest.raises(ValueError):
        OperationLease(store, "x", "h", ttl_seconds=0)
    with pytest.raises(ValueError):
        OperationLease(store, "x", "h", ttl_seconds=1, renew_every=2)


def test_kept_lease_passes_to_the_next_step_of_the_same_holder(store):
    with OperationLease(store, "t/compaction", "dag/run1", release=False):
        pass
    assert store.get_lease("t/compaction").holder == "dag/run1"
    with pytest.raises(LeaseHeldError, match="held by dag/run1"):
        with OperationLease(store, "t/compaction", "dag/run2"):
            pass
    with OperationLease(store, "t/compaction", "dag/run1"):  # the last step releases
        pass
    assert store.get_lease("t/compaction") is None


def test_kept_lease_is_released_when_the_step_fails(store):
    with pytest.raises(RuntimeError):
        with OperationLease(store, "t/compaction", "dag/run1", release=False):
            raise RuntimeError("job creation failed")
    assert store.get_lease("t/compaction") is None


def test_a_lease_of_a_killed_cli_process_of_this_host_is_taken_over_and_no_other(store):
    import os
    import socket
    import subprocess
    import sys

    from sleeper_ops.cli.run_ids import process_gone

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    killed = f"cli/flush/{host}/{dead.pid}"
    alive = f"cli/flush/{host}/{os.getppid()}"
    elsewhere = f"cli/flush/{host}-other/{dead.pid}"
    for holder, taken in ((killed, True), (alive, False), (elsewhere, False), ("dag/run/1", False)):
        store.acquire_lease("t/flush", holder, 600)
        lease = OperationLease(store, "t/flush", "cli/flush/me/1", holder_gone=process_gone)
        if taken:
            with lease:
                assert store.get_lease("t/flush").holder == "cli/flush/me/1"
            assert store.get_lease("t/flush") is None
        else:
            with pytest.raises(LeaseHeldError, match=holder):
                lease.__enter__()
            assert store.get_lease("t/flush").holder == holder
            store.release_lease("t/flush", holder)


def test_a_release_that_fails_never_hides_the_bodys_error_and_the_lease_lapses_by_itself(store, clock, caplog):
    import logging

    from statestore.errors import StateStoreUnavailableError

    def unreachable(*args):
        raise StateStoreUnavailableError("server closed the connection unexpectedly")

    real_release = store.release_lease
    store.release_lease = unreachable
    with caplog.at_level(logging.DEBUG, logger="sleeper_ops.maintenance.leases"):
        with pytest.raises(RuntimeError, match="the body's own error"):
            with OperationLease(store, "t/gc", "run-a", ttl_seconds=30):
                raise RuntimeError("the body's own error")
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == [], "the body's error is the one said"
        assert any("could not release lease t/gc" in r.getMessage() and r.exc_info for r in caplog.records
                   if r.levelno == logging.DEBUG)
        caplog.clear()
        with OperationLease(store, "t/split", "run-a", ttl_seconds=30):
            pass
        (warning,) = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert warning.getMessage() == ("could not release lease t/split held by run-a (server closed the "
                                        "connection unexpectedly); it lapses within 30s")
        assert warning.exc_info is None, "one line, no traceback"
    store.release_lease = real_release
    with pytest.raises(LeaseHeldError):
        with OperationLease(store, "t/gc", "run-b"):
            pass
    clock.advance(31)
    with OperationLease(store, "t/gc", "run-b"):  # lapsed: taken
        assert store.get_lease("t/gc").holder == "run-b"
