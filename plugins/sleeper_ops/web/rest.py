"""The REST API of DESIGN.md section 5, as a FastAPI app.

:func:`create_app` builds the app over a provider of the :class:`~sleeper_ops.Sleeper`
to serve, from one router per resource (:mod:`sleeper_ops.web.routes`); the Airflow
plugin (:mod:`sleeper_ops.orchestration.plugin`) mounts it in the Airflow API server at
``/sleeper/api/v1`` with Airflow's authentication and per-table authorisation as
``auth_dependency``. Routes (``{t}`` is a table name):

=======  =============================  ===============================================
POST     /tables/{t}/ingest-requests    ``{"files": [...]}``: queue files for the batcher
GET      /tables/{t}/ingest-requests    the table's requests (``?status=``, ``?limit=``)
POST     /tables/{t}/records            ``{"records": [...]}``: into the write buffer (201 once durable, 429 full)
GET      /tables/{t}/records            ``?key=`` (repeatable) and/or ``?min=&max=`` [``&as_of=``]
DELETE   /tables/{t}/records            ``?key=``/``?min=&max=`` [``&where=``]: delete them (one commit)
GET      /tables                        every table (the requester may read)
GET      /tables/{t}                    one table, every property with its default
GET      /tables/{t}/partitions         the partition tree, with files and records (paged)
GET      /tables/{t}/files              files and their references (paged)
GET      /tables/{t}/jobs               job status records, newest first
GET      /metrics                       readable tables' figures, Prometheus text (:mod:`~sleeper_ops.web.metrics`)
=======  =============================  ===============================================

``GET`` routes read, ``POST`` routes write; the table is the path's ``{t}`` (see
:mod:`sleeper_ops.web.rest_auth` for what an ``auth_dependency`` is told).

Values in URLs are JSON, as in the CLI: ``key=42``, ``key="abc"``, several row key
fields as a JSON array, bytes as base64 strings; ``max`` may be ``null`` or left out
(unbounded), and so may ``min``. A query parameter a route does not take is refused (422,
naming it: :mod:`sleeper_ops.web.rest_params`), never ignored. ``as_of`` (a transaction
number or an ISO 8601 time) reads records as ``sleeper query --as-of`` does. Records in
and out are JSON objects with bytes as base64 strings and
maps as objects (the CLI's ``jsonl``).

``GET /tables/{t}/partitions`` and ``/files`` are paged (:mod:`sleeper_ops.web.rest_pages`):
``{"partitions"|"files": [...], "next": token or null}``, at most ``limit`` entries
(default 1,000, at most 10,000); pass ``next=`` the token for the following page. A
response never holds the whole state, and ``/files`` reads only its page where the
state store allows (PostgreSQL).

``GET /tables/{t}/records`` is streamed (:mod:`sleeper_ops.web.rest_records`): at most
``limit`` records (default 10,000), read from the table only until ``limit`` are out,
with the server's memory bounded by a few batches whatever the table's size. An
answer of one batch (a key lookup, mostly) is known whole before the response starts
and is sent as one body, without the stream's hops between threads.

Files to ingest (``POST /tables/{t}/ingest-requests``) must lie under the allowed
ingest prefixes (:mod:`sleeper_ops.web.rest_paths`): by default the object store's
``ingest`` folder and ``SLEEPER_HOME/ingest``; never a table's own data files.

``POST`` routes and ``DELETE /tables/{t}/records`` take an ``Idempotency-Key`` header
(:mod:`statestore.client_writes`): a request sent again with the same key and body
(after a timeout, or a 503 whose ``outcome`` is ``unknown``) stores nothing and gets the
first answer (the same ``seq``, the same request ids, the same tombstone); the key with
another body is refused (422).

Errors are ``{"detail": message}``, the message a string: 404 for an unknown table;
422 for a request that is not of the documented shape (the message names each
parameter or body field at fault), or records or files that do not fit the table or
lie outside the allowed ingest prefixes (nothing is queued or written); 400 for
other bad input (a key that is not JSON); 409 for a commit that kept conflicting
(retry); 503 when the state or object store cannot be reached (a write's 503 body
adds ``outcome``: ``unknown`` or ``not_stored``, see :func:`~sleeper_ops.web.rest_errors.error_body`). A 500 is a bug.
"""

from __future__ import annotations

import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, Sequence

from fastapi import Depends, FastAPI
from fastapi.exceptions import RequestValidationError

from sleeper_ops.web.rest_auth import TableFilter
from sleeper_ops.web.rest_errors import sleeper_error, validation_error
from sleeper_ops.web.rest_models import ErrorOut
from sleeper_ops.web.rest_params import refuse_unknown_query_params
from sleeper_ops.web.routes import ingest, metrics, records, tables
from sleeper_ops.web.routes.context import RestContext, SleeperProvider
from sleeper_ops.web.routes.records import DEFAULT_RECORDS_OUT, MAX_RECORDS_OUT
from statestore.errors import SleeperError

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper

__all__ = ["DEFAULT_RECORDS_OUT", "MAX_RECORDS_OUT", "LazySleeper", "SleeperProvider", "create_app"]
_DESCRIPTION = (
    "Sleeper tables: queue files for ingest, write and read records, and see partitions, files and jobs. "
    "Key values in URLs are JSON (`key=42`, `key=\"abc\"`, a JSON array for several row key fields, bytes as "
    "base64 strings); records are JSON objects with bytes as base64 strings and maps as objects. "
    "Record reads are streamed, at most `limit` records. Files to ingest must lie under the allowed ingest "
    "prefixes (by default the object store's ingest folder and SLEEPER_HOME/ingest), never a table's data files. "
    "Errors are `{\"detail\": message}`: 404 unknown table, 422 input that does not fit (nothing is written), "
    "400 other bad input.")


# ----- the Sleeper to serve -----------------------------------------------------------
class LazySleeper:
    """A provider opening one :class:`~sleeper_ops.Sleeper` on first use (thread-safe):
    ``Sleeper(home)``, where ``home=None`` means ``SLEEPER_HOME`` (default ``.sleeper``).
    :meth:`close` closes it; the next call opens a new one."""

    def __init__(self, home: Optional[str] = None, factory: Optional[Callable[[], Sleeper]] = None) -> None:
        self.home = home
        self._factory = factory
        self._sleeper: Optional[Sleeper] = None
        self._lock = threading.Lock()

    def __call__(self) -> Sleeper:
        s = self._sleeper
        if s is not None:
            return s
        with self._lock:
            if self._sleeper is None:
                if self._factory is not None:
                    self._sleeper = self._factory()
                else:
                    from sleeper_ops.api import Sleeper

                    self._sleeper = Sleeper(self.home)
            return self._sleeper

    def close(self) -> None:
        with self._lock:
            s, self._sleeper = self._sleeper, None
        if s is not None:
            s.close()


# ----- the app ------------------------------------------------------------------------
def create_app(sleeper_provider: SleeperProvider, *, auth_dependency: Optional[Callable[..., Any]] = None,
               table_filter: Optional[TableFilter] = None,
               ingest_prefixes: Optional[Sequence[str]] = None) -> FastAPI:
    """The REST app over the Sleeper ``sleeper_provider()`` returns (called per request).

    Args:
        sleeper_provider: returns the Sleeper to serve; if it has a ``close()`` method
            (e.g. :class:`LazySleeper`), that is called when the app shuts down.
        auth_dependency: a FastAPI dependency run before every route (not the OpenAPI
            schema or docs), after routing, so it can tell what the request needs with
            :func:`sleeper_ops.web.rest_auth.access_of`; it raises an HTTPException
            (401/403) to refuse a request.
        table_filter: which tables ``GET /tables`` lists to a requester (default: all).
        ingest_prefixes: where files to ingest may be (see
            :mod:`sleeper_ops.web.rest_paths`); default: the served Sleeper's
            configuration (:meth:`~sleeper_ops.config.SleeperConfig.ingest_prefixes`) or,
            for a Sleeper opened without one, its object store and ``SLEEPER_HOME/ingest``.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        close = getattr(sleeper_provider, "close", None)
        if callable(close):
            close()

    error_codes = [400, 404, 409, 422, 503] + ([401, 403] if auth_dependency is not None else [])
    app = FastAPI(
        title="Sleeper REST API",
        version="1",
        description=_DESCRIPTION,
        # authentication first: a request refused there learns nothing of the parameters
        dependencies=([Depends(auth_dependency)] if auth_dependency is not None else [])
        + [Depends(refuse_unknown_query_params)],
        lifespan=lifespan,
        responses={code: {"model": ErrorOut} for code in sorted(error_codes)},
    )
    app.add_exception_handler(SleeperError, sleeper_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.state.rest_context = RestContext(sleeper_provider, table_filter, ingest_prefixes)
    for routes in (tables, metrics, ingest, records):  # in this order in the OpenAPI schema
        app.include_router(routes.router)
    return app
