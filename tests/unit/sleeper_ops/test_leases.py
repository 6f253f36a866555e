"""The exclusive operation lease: one holder at a time, renewed while held, always released."""

from __future__ import annotations

import threading
import time

import pytest

from sleeper_ops.maintenance.leases import OperationLease, lease_name
from statestore.errors import LeaseHeldError
from statestore.memory import InMemoryStateStore


@pytest.fixture
def store():
    return InMemoryStateStore()


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


def test_running_holder_keeps_its_lease_beyond_the_ttl(store):
    with OperationLease(store, "t/compaction", "long-run", ttl_seconds=0.3, renew_every=0.05) as lease:
        time.sleep(0.8)
        with pytest.raises(LeaseHeldError):
            with OperationLease(store, "t/compaction", "other", ttl_seconds=0.3, renew_every=0.05):
                pass
        assert lease.renewals >= 3
        assert not lease.lost


def test_crashed_holders_lease_lapses_after_its_ttl(store):
    # A holder that took the lease and died: no renewals, no release.
    assert store.acquire_lease("t/split", "crashed", 0.2) is not None
    with pytest.raises(LeaseHeldError, match="crashed"):
        with OperationLease(store, "t/split", "next"):
            pass
    time.sleep(0.3)
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


def test_same_holder_may_reenter(store):
    with OperationLease(store, "t/gc", "run-a/1"):
        with OperationLease(store, "t/gc", "run-a/1"):
            pass


def test_racing_threads_exactly_one_runs(store):
    barrier = threading.Barrier(8)
    ran, refused = [], []

    def contender(i: int) -> None:
        barrier.wait()
        try:
            with OperationLease(store, "t/compaction", f"run-{i}"):
                ran.append(i)
                time.sleep(0.2)
        except LeaseHeldError as e:
            refused.append(str(e))

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ran) == 1
    assert len(refused) == 7
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
