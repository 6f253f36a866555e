"""What a request to the REST API (or the status page) asks for, for an authoriser to check.

The apps themselves authenticate and authorise nothing: whoever mounts them passes an
``auth_dependency`` (the Airflow plugin passes one checking the request against the
auth manager, :mod:`sleeper_ops.orchestration.plugin`). That dependency runs after routing,
before the route, and learns from :func:`access_of` what the request needs:

* ``read`` for ``GET``/``HEAD``/``OPTIONS``, ``write`` for any other method;
* the table named in the path (the ``{t}`` of ``/tables/{t}/...``), or None for a route
  that is not about one table (``GET /tables``, the status page's index).

A route not about one table that lists tables lists only those the requester may read,
as the ``table_filter`` given to the app decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection, Literal, Optional, Sequence

if TYPE_CHECKING:
    from starlette.requests import Request

    from statestore.catalog import TableInfo

Action = Literal["read", "write"]
#: Given a request (already authenticated and authorised) and table names, the names
#: the requester may read.
TableFilter = Callable[["Request", Sequence[str]], Collection[str]]
_READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def readable_tables(request: Request, infos: Sequence[TableInfo],
                    table_filter: Optional[TableFilter]) -> list[TableInfo]:
    """The tables of ``infos`` the requester may read, in their order (all of them when
    there is no ``table_filter``)."""
    if table_filter is None:
        return list(infos)
    readable = set(table_filter(request, [i.name for i in infos]))
    return [i for i in infos if i.name in readable]


@dataclass(frozen=True)
class Access:
    """What one request needs: to ``read`` or ``write`` one table, or (``table`` None)
    to read or write the catalog as a whole."""

    action: Action
    table: Optional[str]


def access_of(request: Request, table_param: str = "t") -> Access:
    """The access ``request`` needs: its method decides the action, the path parameter
    ``table_param`` (when the route has one) the table."""
    action: Action = "read" if request.method.upper() in _READ_METHODS else "write"
    table = request.path_params.get(table_param)
    return Access(action, table if isinstance(table, str) else None)
