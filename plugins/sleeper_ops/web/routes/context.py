"""What every REST route shares: the :class:`RestContext` that
:func:`~sleeper_ops.web.rest.create_app` keeps on ``app.state``, given to a route by the
:data:`Context` dependency."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Callable, Optional, Sequence

from fastapi import Depends, Request

from sleeper_ops.web.rest_auth import TableFilter
from statestore.errors import TableNotFoundError

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper
    from sleeper_ops.table import Table

SleeperProvider = Callable[[], "Sleeper"]


#: the most table names :meth:`RestContext.kept_table` keeps (past it, it starts again)
KEPT_TABLES = 1024


@dataclass(frozen=True)
class RestContext:
    """The Sleeper to serve (``sleeper_provider()``, called per request), which tables
    ``GET /tables`` and ``/metrics`` list to a requester (``table_filter``; None: all),
    and where files to ingest may be (``ingest_prefixes``; None: the served Sleeper's
    configuration, see :meth:`allowed_prefixes`)."""

    sleeper_provider: SleeperProvider
    table_filter: Optional[TableFilter] = None
    ingest_prefixes: Optional[Sequence[str]] = None
    #: table name -> the Table it was found to be, for :meth:`kept_table`
    _kept: dict[str, Table[Sleeper]] = field(default_factory=dict, compare=False, repr=False)

    def sleeper(self) -> Sleeper:
        return self.sleeper_provider()

    def table(self, name: str) -> Table[Sleeper]:
        """Table ``name`` looked up now; TableNotFoundError (404) when there is none."""
        if "\x00" in name:  # no store holds such a name; PostgreSQL cannot even be asked
            raise TableNotFoundError(f"table {name!r} not found: a table name holds no NUL character")
        table = self.sleeper_provider().table(name)
        if len(self._kept) >= KEPT_TABLES:
            self._kept.clear()
        self._kept[name] = table
        return table

    def kept_table(self, name: str) -> tuple[Table[Sleeper], bool]:
        """Table ``name`` as last looked up in this process, without asking the state store,
        and True; else (never looked up, or by another Sleeper) looked up now, and False.
        A kept Table may since have been renamed or deleted: use it only for work that
        checks its name against the catalog entry it reads anyway (a query ``by_name``),
        and on TableNotFoundError look the name up again with :meth:`table`."""
        sleeper = self.sleeper_provider()
        table = self._kept.get(name)
        if table is not None and table.sleeper is sleeper:
            return table, True
        return self.table(name), False

    def allowed_prefixes(self, sleeper: Sleeper) -> Sequence[str]:
        """Where files to ingest may be: ``ingest_prefixes`` if given, else the
        configuration's (:meth:`~sleeper_ops.config.SleeperConfig.ingest_prefixes`) or,
        for a Sleeper opened without one, its object store's and ``SLEEPER_HOME``'s
        ``ingest`` folders."""
        if self.ingest_prefixes is not None:
            return self.ingest_prefixes
        if sleeper.config is not None:
            return sleeper.config.ingest_prefixes()
        from sleeper_ops.config import default_home, default_store_ingest_prefix

        return (default_store_ingest_prefix(_store_root(sleeper)), os.path.abspath(default_home() / "ingest"))

    def table_areas(self, sleeper: Sleeper) -> list[str]:
        """Every table's own area of the object store (never ingested through REST)."""
        root = _store_root(sleeper).rstrip("/")
        return [f"{root}/{info.table_id}" for info in sleeper.tables()]


def _store_root(sleeper: Sleeper) -> str:
    store = sleeper.objects
    return store.uri if not store.is_local else store.root


async def rest_context(request: Request) -> RestContext:
    """The app's context (a FastAPI dependency; a coroutine, so FastAPI does not hand this
    lookup of an attribute to a worker thread and back, as it does a plain function's)."""
    context: RestContext = request.app.state.rest_context
    return context


#: a route's parameter ``ctx: Context`` is the app's :class:`RestContext`
Context = Annotated[RestContext, Depends(rest_context)]
