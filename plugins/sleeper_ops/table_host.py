"""What a :class:`~sleeper_ops.table.Table` uses of the Sleeper it belongs to.

:class:`TableHost` names it as a protocol (:class:`~sleeper_ops.api.Sleeper` is one), so
the table layer never imports the facade above it. ``Table`` is generic in its host:
``Sleeper.table(name)`` gives a ``Table[Sleeper]``, whose ``sleeper`` is the facade.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Protocol

from sleeper_ops.stores import Stores

if TYPE_CHECKING:
    from sleeper_ops.compaction.runners import BatchRunner
    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.query.shared import SharedRunners


class TableHost(Stores, Protocol):
    """A Sleeper as its tables see it."""

    @property
    def objects(self) -> ObjectStore:
        """The instance's data files."""

    @property
    def config(self) -> Optional[SleeperConfig]:
        """The configuration it was opened from; None when given its stores directly."""

    @property
    def python_iterator_modules(self) -> tuple[str, ...]:
        """Where tables' Python iterators may come from."""

    @property
    def queries(self) -> SharedRunners:
        """The query runners its tables share."""

    def spark_batch_runner(self, run_id: Optional[str] = None) -> Optional[BatchRunner]:
        """A runner of compaction job batches on Spark, or None without a configuration."""

