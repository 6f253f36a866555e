"""The table status page: tables, partition tree, files and job history, as HTML.

:func:`create_status_app` builds a small FastAPI app that the Airflow plugin mounts at
``/sleeper/ui`` and links from the UI's navigation (an ``external_views`` entry, shown
inside the Airflow UI). Pages, rendered on the server with no JavaScript and nothing
fetched from elsewhere (charts are inline SVG, so it works with no internet):

* ``/`` - every table the requester may read (as ``table_filter`` decides, the same
  filter as REST ``GET /tables``): online or not, leaf partitions, files, records, jobs
  by status, and a red mark with the reason on a table whose DAGs cannot be built (a
  long name is cut with an ellipsis, whole in its title, so the columns stay on screen);
* ``/tables/{name}`` - one table: records per leaf partition across the key space
  (against the split threshold), the partition tree with files and records per
  partition, the backlog figures over time (buffered records and their age, pending
  ingest requests, pending compaction jobs, files awaiting GC: sampled whenever this page
  or ``/metrics`` is read, :data:`sleeper_ops.metrics.BACKLOG`), jobs plotted over time
  (stacked by kind, failures marked) and their rows/s, the latest jobs, and the file
  references.

Authentication is whatever ``auth_dependency`` enforces (the plugin passes Airflow's:
the UI's ``_token`` cookie or a bearer token); a refused request gets a small HTML page
with the status code and a link to sign in.

Memory is bounded by the number of partitions and jobs shown, not by the number of
files: pages read each table's overview (``StateStore.overview``: counts by aggregate
queries, and at most :data:`~sleeper_ops.web.status_render.MAX_FILE_ROWS` files), never
its whole state. The renderers are pure functions of overviews and job records, in
:mod:`sleeper_ops.web.status_render` (pages) and :mod:`sleeper_ops.web.status_charts` (SVG).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from starlette.requests import Request

from sleeper_ops.metrics import BACKLOG, sample_metrics
from sleeper_ops.web.rest_auth import TableFilter, readable_tables
from sleeper_ops.web.status_render import MAX_FILE_ROWS, TableSummary, render_index, render_refused, render_table

if TYPE_CHECKING:
    from fastapi import FastAPI

    from sleeper_ops.api import Sleeper
    from statestore.catalog import TableInfo

URL_PREFIX = "/sleeper/ui"
#: The Airflow plugin's ``external_views`` entry for the page (href relative to the UI's base).
EXTERNAL_VIEW = {"name": "Sleeper tables", "href": "sleeper/ui/", "destination": "nav", "category": "browse",
                 "url_route": "sleeper-tables"}
DEFAULT_JOB_LIMIT = 1000


# ----- the app ---------------------------------------------------------------------------------
def create_status_app(sleeper_provider: Callable[[], Sleeper], *,
                      auth_dependency: Optional[Callable[..., Any]] = None,
                      table_filter: Optional[TableFilter] = None,
                      job_limit: int = DEFAULT_JOB_LIMIT,
                      dag_problem: Optional[Callable[[TableInfo], Optional[str]]] = None) -> FastAPI:
    """The status page app over the Sleeper ``sleeper_provider()`` returns (per request);
    ``auth_dependency`` guards every page; ``table_filter`` decides which tables the
    index lists to a requester (default: all); ``dag_problem`` tells why a table's DAGs
    cannot be built (the plugin passes the DAG factory's own check), and the pages mark
    such a table red with the reason."""
    problem_of = dag_problem or (lambda info: None)
    from fastapi import Depends, FastAPI, HTTPException, Query
    from fastapi.responses import HTMLResponse

    from statestore.errors import TableNotFoundError

    app = FastAPI(title="Sleeper table status", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(auth_dependency)] if auth_dependency is not None else [])

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> HTMLResponse:
        return HTMLResponse(render_refused(exc.status_code, str(exc.detail)), status_code=exc.status_code,
                            headers=exc.headers)

    @app.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        sleeper = sleeper_provider()
        infos = sleeper.tables()
        infos = readable_tables(request, infos, table_filter)
        out = []
        for info in infos:
            overview = sleeper.state_store.overview(info.table_id, file_limit=0)
            jobs = sleeper.state_store.list_jobs(info.table_id, limit=job_limit)
            out.append(TableSummary.of(info, overview, jobs, problem_of(info)))
        return HTMLResponse(render_index(out))

    @app.get("/tables/{name}", response_class=HTMLResponse)
    def table_page(name: str, jobs: int = Query(job_limit, ge=1, le=100_000)) -> HTMLResponse:
        sleeper = sleeper_provider()
        try:
            info = sleeper.state_store.get_table(name)
        except TableNotFoundError as e:
            raise HTTPException(404, str(e)) from None
        overview = sleeper.state_store.overview(info.table_id, file_limit=MAX_FILE_ROWS)
        records = sleeper.state_store.list_jobs(info.table_id, limit=jobs)
        sample_metrics(sleeper.state_store, info)  # this read is a sample of the backlog too
        return HTMLResponse(render_table(info, overview, records, backlog=BACKLOG.samples(info.table_id),
                                         dag_problem=problem_of(info)))

    return app
