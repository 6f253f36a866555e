"""The identity of a Sleeper instance in lineage: its state store's own id.

:func:`namespace` is ``sleeper://<instance id>``, the id being the state store's
:meth:`~statestore.store.StateStore.instance_id` (a UUID kept in the store itself, made
once on its first open). It is the same wherever the store is opened from -- the CLI,
``sleeper airflow``, the workers of ``sleeper cluster``, a scheduled run that only has
``SLEEPER_HOME`` -- and for every spelling of its address (a PostgreSQL socket path or
host and port); two homes on one database share it, two databases never do. It holds
no credentials and is never derived from a DSN.

Each process asks the store once per address (:func:`namespace` caches by the
configuration's state-store options; an in-memory store is asked each time, as each
is its own instance), so lineage costs no round trip per task after the first.
A store that cannot give its id raises (StateStoreUnavailableError): nothing is
invented in its place.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig
    from statestore.roles import TableCatalog

#: the URI scheme of a Sleeper instance's namespace
SCHEME = "sleeper"

_namespaces: dict[str, str] = {}
_lock = threading.Lock()


def _address(config: Optional[SleeperConfig]) -> Optional[str]:
    """The cache key of ``config``'s state store (None: not cached, an in-memory store)."""
    if config is None or config.state_store_backend == "memory":
        return None
    return repr((config.state_store_backend, sorted(config.state_store_options().items())))


def _cached(key: Optional[str]) -> Optional[str]:
    """This process's namespace for the store ``key`` names, if it has asked already."""
    if key is None:
        return None
    with _lock:
        return _namespaces.get(key)


def namespace(store: TableCatalog, config: Optional[SleeperConfig] = None) -> str:
    """``sleeper://<instance id>`` of ``store`` (opened from ``config``, which keys the
    per-process cache; see the module docstring)."""
    key = _address(config)
    found = _cached(key)
    if found is not None:
        return found
    ns = f"{SCHEME}://{store.instance_id()}"
    if key is not None:
        with _lock:
            _namespaces.setdefault(key, ns)
    return ns


def config_namespace(config: SleeperConfig) -> str:
    """:func:`namespace` of the state store ``config`` names, opened (and closed) only when
    this process has not asked it yet."""
    found = _cached(_address(config))
    if found is not None:
        return found
    from statestore.backends import open_state_store

    with open_state_store(config.state_store_backend, **config.state_store_options()) as store:
        return namespace(store, config)


def forget_namespaces() -> None:
    """Empty this process's cache (tests)."""
    with _lock:
        _namespaces.clear()
