"""Every state store plays every role of :mod:`statestore.roles`, and the roles together
are the whole StateStore interface: a caller typed against one role can be handed any
backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from statestore.memory import InMemoryStateStore
from statestore.roles import ROLES
from statestore.store import StateStore


def _members(role: type) -> set[str]:
    return {n for n in (*vars(role), *getattr(role, "__annotations__", {})) if not n.startswith("_")}


@pytest.mark.parametrize("role", ROLES, ids=lambda r: r.__name__)
def test_the_in_memory_store_plays_each_role(role: type) -> None:
    assert isinstance(InMemoryStateStore(), role)


def test_the_roles_cover_every_public_method_of_the_interface_once() -> None:
    named = [m for role in ROLES for m in _members(role)]
    assert len(named) == len(set(named)), "a method is in two roles"
    public = {n for n in dir(StateStore) if not n.startswith("_")} - {"close"}
    assert set(named) == public


#: the attributes of a ComposedStateStore holding its role objects
_ROLE_ATTRIBUTES = ("catalog", "table_commits", "job_tracker", "leases", "ingest_queue", "write_buffer",
                    "client_writes", "table_history")


def _dynamodb_store(tmp_path: Path) -> StateStore:
    """A DynamoDB store over an endpoint nobody answers: building it sends no request."""
    from statestore.dynamodb import DynamoDBStateStore, DynamoOptions, LocalBlobStore

    options = DynamoOptions(endpoint_url="http://127.0.0.1:9", access_key="test", secret_key="test")
    return DynamoDBStateStore(options, LocalBlobStore(tmp_path))


def _postgres_role_classes() -> list[type]:
    from statestore.postgres.buffer import PostgresWriteBuffer
    from statestore.postgres.catalog import PostgresCatalog
    from statestore.postgres.client_writes import PostgresClientWrites
    from statestore.postgres.history import PostgresHistory
    from statestore.postgres.ingest_queue import PostgresIngestQueue
    from statestore.postgres.jobs import PostgresJobs
    from statestore.postgres.leases import PostgresLeases
    from statestore.postgres.table_commits import PostgresCommits

    return [PostgresCatalog, PostgresCommits, PostgresJobs, PostgresLeases, PostgresIngestQueue, PostgresWriteBuffer,
            PostgresClientWrites, PostgresHistory]


def test_every_role_object_is_a_plain_object_not_a_stack_of_mixins(tmp_path: Path) -> None:
    """A role object has at most one base besides ``object`` (the table commits roles:
    :class:`~statestore.role_defaults.StateReads`), so what it uses of the others comes
    through collaborators given to it, not through ``self``."""
    classes = {type(getattr(store, a)) for store in (InMemoryStateStore(), _dynamodb_store(tmp_path))
               for a in _ROLE_ATTRIBUTES}
    classes.update(_postgres_role_classes())
    stacked = {c.__name__: [b.__name__ for b in c.__mro__[1:-1]] for c in classes if len(c.__mro__) > 3}
    assert stacked == {}


def test_each_role_of_the_dynamodb_store_is_its_own_object_over_the_one_context(tmp_path: Path) -> None:
    store = _dynamodb_store(tmp_path)
    roles = [getattr(store, a) for a in _ROLE_ATTRIBUTES]
    assert len({id(r) for r in roles}) == len(roles), "one object plays two roles"
    assert all(r.context is store.context for r in roles)  # type: ignore[attr-defined]


def test_each_in_memory_store_has_an_instance_id_of_its_own() -> None:
    a, b = InMemoryStateStore(), InMemoryStateStore()
    assert a.instance_id() == a.instance_id() == a.catalog.instance_id()
    assert a.instance_id() != b.instance_id()
