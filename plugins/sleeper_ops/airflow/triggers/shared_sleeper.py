"""One Sleeper per Airflow connection for the triggers of one process (the triggerer).

A trigger that polls for as long as its DAG exists (the write buffer's watcher, one per
table) must neither open a state store connection per poll (a new PostgreSQL backend
every few seconds per table, and an Airflow connection lookup) nor hold one of its own
(a triggerer watching N tables would hold N connections; PostgreSQL allows 100 by
default). The triggers of one process share one Sleeper per connection id instead: its
state store lends one connection to polls that do not overlap and opens more only while
they do.

The shared Sleeper is opened by the first poll that needs it, and replaced after
:data:`REOPEN_SECONDS` (so an edited connection is taken up) or after a poll through it
failed (a lost store; a table that does not exist is an answer, not a failure). A
replaced Sleeper is closed once no poll uses it, and the current one once the last
trigger using the connection has ended.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from statestore.errors import TableNotFoundError

log = logging.getLogger(__name__)

#: seconds one shared Sleeper serves new polls before another is opened
REOPEN_SECONDS = 600.0


@dataclass
class _Entry:
    conn_id: str
    sleeper: Any
    opened_at: float
    polls: int = 0  # polls using it now
    closed: bool = False


_lock = threading.Lock()
_current: dict[str, _Entry] = {}  # connection id -> the Sleeper new polls take
_triggers: dict[str, int] = {}  # connection id -> triggers using it


def _open(conn_id: str) -> Any:
    from sleeper_ops.airflow.hooks.sleeper import SleeperHook

    return SleeperHook(conn_id).get_conn()


def joined(conn_id: str) -> None:
    """A trigger that will poll through ``conn_id`` has started."""
    with _lock:
        _triggers[conn_id] = _triggers.get(conn_id, 0) + 1


def left(conn_id: str) -> None:
    """A trigger that polled through ``conn_id`` has ended: the last one closes the
    connection's Sleeper (once no poll uses it)."""
    with _lock:
        _triggers[conn_id] = _triggers.get(conn_id, 1) - 1
        closing = None
        if _triggers[conn_id] <= 0:
            del _triggers[conn_id]
            entry = _current.get(conn_id)
            closing = _retire(entry) if entry is not None else None
    _close(closing)


@contextmanager
def sleeper_for(conn_id: str) -> Iterator[Any]:
    """The shared Sleeper of ``conn_id`` for one poll (see the module docstring)."""
    with _lock:
        entry = _current.get(conn_id)
        stale = entry if entry is not None and time.monotonic() - entry.opened_at > REOPEN_SECONDS else None
        closing = _retire(stale) if stale is not None else None
        if _current.get(conn_id) is None:  # opened under the lock: the other polls would open it too
            _current[conn_id] = _Entry(conn_id, _open(conn_id), time.monotonic())
        entry = _current[conn_id]
        entry.polls += 1
    _close(closing)
    failed = False
    try:
        yield entry.sleeper
    except TableNotFoundError:
        raise  # the store answered
    except BaseException:
        failed = True
        raise
    finally:
        with _lock:
            entry.polls -= 1
            # retired on failure, or when no trigger uses the connection any more (a poll
            # that ran on after its trigger ended)
            retire = failed or conn_id not in _triggers
            closing = _retire(entry) if retire else _closable(entry)
        _close(closing)


def _retire(entry: _Entry) -> Optional[_Entry]:
    """Take ``entry`` from new polls (called holding the lock); it, when no poll uses it."""
    if _current.get(entry.conn_id) is entry:
        del _current[entry.conn_id]
    return _closable(entry)


def _closable(entry: _Entry) -> Optional[_Entry]:
    """``entry`` when it is retired, unused and not yet closed (marked closed: the caller
    closes it after releasing the lock)."""
    if _current.get(entry.conn_id) is entry or entry.polls or entry.closed:
        return None
    entry.closed = True
    return entry


def _close(entry: Optional[_Entry]) -> None:
    if entry is None:
        return
    try:
        entry.sleeper.close()
    except Exception as e:  # a store already lost: nothing left to release
        log.debug("closing a shared Sleeper: %s", e)
