"""The REST API of DESIGN.md section 5, as a FastAPI app.

:func:`create_app` builds the app over a provider of the :class:`~sleeper_ops.Sleeper`
to serve; the Airflow plugin (:mod:`sleeper_ops.orchestration.plugin`) mounts it in the
Airflow API server at ``/sleeper/api/v1`` with Airflow's authentication and per-table
authorisation as ``auth_dependency``. Routes (``{t}`` is a table name):

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

import os
import threading
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional, Sequence

from fastapi import Depends, FastAPI, Header, Query, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response, StreamingResponse

from sleeper_ops.errors import QueryError
from sleeper_ops.web.metrics import add_metrics_route
from sleeper_ops.web.rest_auth import TableFilter, readable_tables
from sleeper_ops.web.rest_deletes import add_delete_routes
from sleeper_ops.web.rest_errors import sleeper_error, validation_error
from sleeper_ops.web.rest_models import (
    ErrorOut,
    FilesOut,
    IngestRequestOut,
    IngestRequestsIn,
    IngestRequestsOut,
    JobOut,
    PartitionsOut,
    RecordsIn,
    RecordsOut,
    TableOut,
    WriteOut,
)
from sleeper_ops.web.rest_pages import DEFAULT_PAGE, MAX_PAGE, after_of, next_token
from sleeper_ops.web.rest_params import refuse_unknown_query_params
from sleeper_ops.web.rest_paths import check_ingest_paths
from sleeper_ops.web.rest_records import in_threads, prepended, records_body
from statestore.errors import (
    SleeperError,
    TableNotFoundError,
)
from statestore.ingest_requests import INGEST_REQUEST_STATUSES
from statestore.jobs import JOB_KINDS

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper, Table
    from statestore.catalog import TableInfo
    from statestore.schema import Schema

SleeperProvider = Callable[[], "Sleeper"]
_DESCRIPTION = (
    "Sleeper tables: queue files for ingest, write and read records, and see partitions, files and jobs. "
    "Key values in URLs are JSON (`key=42`, `key=\"abc\"`, a JSON array for several row key fields, bytes as "
    "base64 strings); records are JSON objects with bytes as base64 strings and maps as objects. "
    "Record reads are streamed, at most `limit` records. Files to ingest must lie under the allowed ingest "
    "prefixes (by default the object store's ingest folder and SLEEPER_HOME/ingest), never a table's data files. "
    "Errors are `{\"detail\": message}`: 404 unknown table, 422 input that does not fit (nothing is written), "
    "400 other bad input.")
_LIMIT_HELP = "the most entries in this page"
_NEXT_HELP = "the 'next' of the previous page (absent: the first page)"
_KEY_HELP = ("an idempotency key (1-255 printable ASCII characters): a request sent again with the same key and "
             "body within sleeper.table.write.idempotency.hours stores nothing and gets the first answer; the same "
             "key with another body is refused (422)")
#: The largest ``limit`` of a record read (the body is streamed: memory does not grow with it).
MAX_RECORDS_OUT = 1_000_000_000
DEFAULT_RECORDS_OUT = 10_000


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
def _table_out(info: TableInfo) -> TableOut:
    return TableOut(name=info.name, table_id=info.table_id, online=info.online, schema=info.schema.to_dict(),
                    properties=info.all_properties(), properties_set=sorted(info.properties))


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

    def table(name: str) -> Table:
        if "\x00" in name:  # no store holds such a name; PostgreSQL cannot even be asked
            raise TableNotFoundError(f"table {name!r} not found: a table name holds no NUL character")
        return sleeper_provider().table(name)

    def store_root(sleeper: Sleeper) -> str:
        store = sleeper.objects
        return store.uri if not store.is_local else store.root

    def allowed_prefixes(sleeper: Sleeper) -> Sequence[str]:
        if ingest_prefixes is not None:
            return ingest_prefixes
        if sleeper.config is not None:
            return sleeper.config.ingest_prefixes()
        from sleeper_ops.config import default_home, default_store_ingest_prefix

        return (default_store_ingest_prefix(store_root(sleeper)), os.path.abspath(default_home() / "ingest"))

    def table_areas(sleeper: Sleeper) -> list[str]:
        """Every table's own area of the object store (never ingested through REST)."""
        root = store_root(sleeper).rstrip("/")
        return [f"{root}/{info.table_id}" for info in sleeper.tables()]

    @app.get("/tables", response_model=list[TableOut], tags=["tables"])
    def list_tables(request: Request) -> list[TableOut]:
        """Every table the requester may read, by name."""
        infos = sleeper_provider().tables()
        infos = readable_tables(request, infos, table_filter)
        return [_table_out(info) for info in infos]

    @app.get("/tables/{t}", response_model=TableOut, tags=["tables"])
    def describe_table(t: str) -> TableOut:
        """One table: schema, online flag and every property with its default."""
        return _table_out(table(t).info)

    @app.get("/tables/{t}/partitions", response_model=PartitionsOut, tags=["tables"])
    def partitions(t: str, limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description=_LIMIT_HELP),
                   next_: Optional[str] = Query(None, alias="next", description=_NEXT_HELP)) -> dict[str, Any]:
        """The partition tree, depth first, with the files and records of each
        partition, a page at a time (read from the table's overview: counts, not files)."""
        from sleeper_ops.reports import partitions_report

        tb = table(t)
        after = after_of("partitions", next_)
        rows = partitions_report(tb.sleeper.state_store.overview(tb.info.table_id, file_limit=0))
        start = 0 if after is None else next((i + 1 for i, r in enumerate(rows) if r["id"] == after), len(rows))
        page = rows[start:start + limit]
        more = start + limit < len(rows)
        return {"partitions": page, "next": next_token("partitions", page[-1]["id"]) if more and page else None}

    @app.get("/tables/{t}/files", response_model=FilesOut, tags=["tables"])
    def files(t: str, limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description=_LIMIT_HELP),
              next_: Optional[str] = Query(None, alias="next", description=_NEXT_HELP)) -> dict[str, Any]:
        """Tracked files by name with their references (none: awaiting garbage
        collection), a page at a time: only the page is read where the state store allows."""
        from sleeper_ops.reports import file_entries

        tb = table(t)
        got = tb.sleeper.state_store.file_page(tb.info.table_id, after=after_of("files", next_), limit=limit + 1)
        page = got[:limit]
        more = len(got) > limit
        return {"files": file_entries(page), "next": next_token("files", page[-1].filename) if more else None}

    @app.get("/tables/{t}/jobs", response_model=list[JobOut], tags=["tables"])
    def jobs(t: str, kind: Optional[str] = Query(None, description=f"one of {', '.join(JOB_KINDS)}"),
             limit: int = Query(1000, ge=1, le=100_000)) -> list[dict[str, Any]]:
        """Job status records (compaction, split, ingest, ...), newest first."""
        from sleeper_ops.reports import jobs_report

        if kind is not None and kind not in JOB_KINDS:
            raise QueryError(f"unknown job kind {kind!r}; expected one of {', '.join(JOB_KINDS)}")
        return jobs_report(table(t).jobs(kind=kind, limit=limit))

    add_metrics_route(app, sleeper_provider, table_filter)

    @app.post("/tables/{t}/ingest-requests", response_model=IngestRequestsOut, status_code=status.HTTP_202_ACCEPTED,
              tags=["ingest"])
    def submit(t: str, body: IngestRequestsIn,
               idempotency_key: Optional[str] = Header(None, description=_KEY_HELP)) -> IngestRequestsOut:
        """Queue files for the table's ingest batcher. Refused whole (422, nothing queued)
        if any file is outside the allowed ingest prefixes, missing or of an unknown type.
        Local paths are queued resolved (symbolic links and ``..`` followed). A repeat
        with the same ``Idempotency-Key`` and files queues nothing and answers with the
        requests the first one queued."""
        from sleeper_ops.ingest.batcher import submit_ingest_requests

        sleeper = table(t).sleeper  # 404 before anything else
        files = check_ingest_paths(body.files, allowed_prefixes(sleeper), table_areas(sleeper))
        reqs = submit_ingest_requests(sleeper, t, files, request_id=idempotency_key)
        return IngestRequestsOut(requests=[IngestRequestOut(**r.to_dict()) for r in reqs])

    @app.get("/tables/{t}/ingest-requests", response_model=list[IngestRequestOut], tags=["ingest"])
    def ingest_requests(t: str, status_: Optional[str] = Query(None, alias="status",
                                                               description=", ".join(INGEST_REQUEST_STATUSES)),
                        limit: int = Query(1000, ge=1, le=100_000)) -> list[IngestRequestOut]:
        """The table's ingest requests, oldest first."""
        tb = table(t)
        reqs = tb.sleeper.state_store.list_ingest_requests(tb.info.table_id, status=status_, limit=limit)
        return [IngestRequestOut(**r.to_dict()) for r in reqs]

    @app.post("/tables/{t}/records", response_model=WriteOut, status_code=status.HTTP_201_CREATED, tags=["ingest"])
    def write_records(t: str, body: RecordsIn,
                      idempotency_key: Optional[str] = Header(None, description=_KEY_HELP)) -> WriteOut:
        """Store the records in the table's write buffer: 201 only once they are durable
        (queries see them at once; a flush files them), all of them or (422) none; 429
        when the buffer is full (nothing stored: send them again after a flush). A
        repeat with the same ``Idempotency-Key`` and records stores nothing and answers
        with the first write's ``seq``."""
        result = table(t).write(body.records, request_id=idempotency_key)
        return WriteOut(records=result.records, seq=result.seq, seconds=result.seconds)

    @app.get("/tables/{t}/records", response_model=RecordsOut, tags=["query"])
    def read_records(t: str,
                     key: list[str] = Query([], description="a key as JSON; repeatable; several row key fields "
                                                            "as a JSON array", examples=[['"abc"'], ["42"]]),
                     lo: Optional[str] = Query(None, alias="min", description="range start (inclusive) on the "
                                                                              "first row key field, as JSON",
                                               examples=['"a"', "0"]),
                     hi: Optional[str] = Query(None, alias="max", description="range end (exclusive) as JSON; "
                                                                              "null or absent: unbounded",
                                               examples=['"m"', "null"]),
                     limit: int = Query(DEFAULT_RECORDS_OUT, ge=1, le=MAX_RECORDS_OUT,
                                        description="the most records to return; reading stops there"),
                     buffer: Optional[bool] = Query(None, description="include records still in the write "
                                                                     "buffer (default true; as_of: false)"),
                     as_of: Optional[str] = Query(None, description="read the table as of transaction N or an "
                                                                    "ISO 8601 time, as 'sleeper query --as-of' "
                                                                    "(files only: the write buffer is excluded)",
                                                  examples=["3", "2026-11-24T09:30:00Z"]),
                     ) -> Response:
        """Records with any of the keys or in the range, in key order, streamed: reading
        stops after ``limit`` records, and the server holds a few batches, not the result.
        With ``as_of``, as the table was right after that transaction (the write buffer
        excluded; ``buffer=true`` with it is refused)."""
        from sleeper_ops.io.codec import parse_key

        tb = table(t)
        if not key and lo is None and hi is None:
            raise QueryError("give at least one key=... or a range min=...&max=...")
        try:
            keys = [parse_key(tb.schema, k) for k in key]
            ranges = [] if lo is None and hi is None else [_parse_range(tb.schema, lo, hi)]
        except RecursionError:
            raise QueryError("a key or range value is JSON nested too deeply") from None
        if as_of is not None and buffer:
            raise QueryError("as_of reads exclude the write buffer: leave out buffer=true")
        # one more than the limit: truncated or not
        batches = tb.query_batches(keys=keys, ranges=ranges, limit=limit + 1, buffer=buffer is not False,
                                   as_of=as_of)
        try:
            first = next(batches, None)  # a failure to start reading still gets its error status
            second = None if first is None else next(batches, None)
        except BaseException:
            batches.close()
            raise
        if second is None:  # the whole answer is in hand (a key lookup, mostly): one body, not a stream
            return Response(b"".join(records_body(first, batches, limit)), media_type="application/json")
        return StreamingResponse(in_threads(records_body(first, prepended(second, batches), limit)),
                                 media_type="application/json")

    add_delete_routes(app, table, _parse_range)
    return app


def _parse_range(schema: Schema, lo: Optional[str], hi: Optional[str]) -> tuple[Any, Optional[Any]]:
    """``[lo, hi)`` on the first row key field from JSON values; an absent or null end is
    unbounded."""
    from sleeper_ops.io.codec import parse_range

    return parse_range(schema, "null" if lo is None else lo, "null" if hi is None else hi)
