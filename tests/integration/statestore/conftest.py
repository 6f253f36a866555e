"""The ``store`` fixture: every backend behind the one StateStore interface."""

from __future__ import annotations

from typing import Iterator

import pytest

from statestore import InMemoryStateStore, StateStore

BACKENDS = ["memory", pytest.param("postgres", marks=pytest.mark.integration)]


def open_backend(request: pytest.FixtureRequest, kind: str) -> StateStore:
    if kind == "memory":
        return InMemoryStateStore()
    from statestore.postgres import PostgresStateStore

    return PostgresStateStore(request.getfixturevalue("pg_dsn"))


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Iterator[StateStore]:
    """A fresh, empty state store of each backend in turn."""
    s = open_backend(request, request.param)
    yield s
    s.close()
