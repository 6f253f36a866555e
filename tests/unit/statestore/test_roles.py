"""Every state store plays every role of :mod:`statestore.roles`, and the roles together
are the whole StateStore interface: a caller typed against one role can be handed any
backend."""

from __future__ import annotations

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
