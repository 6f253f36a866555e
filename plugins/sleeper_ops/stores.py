"""What the core's functions read of the Sleeper they are given: its state store and
the S3 options its inputs are read with.

:class:`Stores` names it as a protocol so a module below the facade
(:mod:`sleeper_ops.ingest.batcher`, :mod:`sleeper_ops.bulk_import.dated`) can take a
:class:`~sleeper_ops.api.Sleeper` without importing it: the facade is above them, and
they never call back into it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

if TYPE_CHECKING:
    from sleeper_ops.io.storage import S3Options
    from statestore.store import StateStore


class Stores(Protocol):
    """A Sleeper as the core's functions see it (``Sleeper`` is one)."""

    @property
    def state_store(self) -> StateStore:
        """The instance's table metadata."""

    @property
    def s3(self) -> Optional[S3Options]:
        """The S3 options input files (``s3://`` URIs) are read with; None: the defaults."""
