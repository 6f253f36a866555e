"""Opening a backend by name, and the retry policy backends share."""

from __future__ import annotations

import random
import re
import sys

import pytest

from statestore import InMemoryStateStore, SleeperError, StateStore
from statestore.backends import BACKENDS, backend_names, open_state_store
from statestore.retry import Backoff


def test_memory_backend_opens_by_name():
    store = open_state_store("memory")
    assert isinstance(store, InMemoryStateStore) and isinstance(store, StateStore)


def test_unknown_backend_is_refused_listing_the_known_ones():
    with pytest.raises(SleeperError, match="unknown state store 'dynamo'.*memory, postgres"):
        open_state_store("dynamo")


def test_postgres_backend_opens_without_connecting_until_used():
    store = open_state_store("postgres", dsn="host=/nonexistent dbname=x")
    assert type(store).__name__ == "PostgresStateStore"
    store.close()  # never connected: nothing to do


@pytest.mark.parametrize("module, package", [("psycopg", "psycopg[binary]"), ("psycopg_pool", "psycopg-pool")])
def test_postgres_backend_without_its_package_names_the_package_to_install(monkeypatch, module, package):
    for name in [m for m in sys.modules if m == "statestore.postgres" or m.startswith("statestore.postgres.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(SleeperError, match=rf"needs the package '{re.escape(package)}'.*pip install") as e:
        open_state_store("postgres", dsn="dbname=x")
    assert isinstance(e.value.__cause__, ImportError)


def test_every_backend_names_a_factory_in_its_own_module():
    import importlib

    for kind, (module, factory, _packages) in BACKENDS.items():
        assert module.startswith("statestore."), kind
        assert callable(getattr(importlib.import_module(module), factory)), kind
    assert backend_names() == tuple(sorted(BACKENDS))


def test_postgres_without_a_dsn_or_an_embedded_directory_is_refused():
    with pytest.raises(SleeperError, match="needs a DSN or a directory"):
        open_state_store("postgres")


def test_backoff_delays_are_jittered_and_capped():
    delays: list[float] = []
    b = Backoff(max_attempts=10, base_seconds=0.01, cap_seconds=0.05, sleep=delays.append, rng=random.Random(1))
    for attempt in range(1, 10):
        b.pause(attempt)
    assert all(0 <= d <= min(0.05, 0.01 * 2**a) for a, d in zip(range(1, 10), delays))
    assert len(set(delays)) == len(delays)  # jittered, not fixed
    assert max(delays) > 0.02  # grows beyond the base
