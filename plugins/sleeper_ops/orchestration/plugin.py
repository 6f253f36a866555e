"""The Airflow plugin: Sleeper's REST API in the Airflow API server, behind Airflow's auth.

Registered through the ``airflow.plugins`` entry point (pyproject.toml), so an Airflow
that has this package installed loads it; no plugins folder is needed. It mounts the
REST app (:mod:`sleeper_ops.web.rest`) at ``/sleeper/api/v1`` (OpenAPI schema at
``/sleeper/api/v1/openapi.json``, docs at ``/sleeper/api/v1/docs``).

Authentication is Airflow's own: :func:`airflow_user` hands the request to the API
server's ``get_user`` (``airflow.api_fastapi.core_api.security``), which validates the
JWT from ``Authorization: Bearer`` (as issued by ``POST /auth/token``) or the UI's
session cookie with the configured auth manager. No valid token: 401 (Airflow answers
403 for a malformed token; here that is 401 too).

Authorisation is per table, through the auth manager, against the table's DAGs (the
``sleeper_<table>_<operation>`` DAGs of :mod:`sleeper_ops.orchestration.dag_factory`, one per
operation in ``OPERATIONS``), as :func:`sleeper_ops.web.rest_auth.access_of` tells
what a request needs:

* reading a table (``GET /tables/{t}/...``) needs read access to every one of its
  DAGs: ``is_authorized_dag(method="GET", details=DagDetails(id=...))``;
* writing to a table (``POST /tables/{t}/records``, ``POST .../ingest-requests``) needs
  the right to run every one of its DAGs: ``is_authorized_dag(method="POST",
  access_entity=DagAccessEntity.RUN, details=DagDetails(id=...))``;
* ``GET /tables`` needs read access to DAGs in general (``is_authorized_dag(method="GET")``)
  and lists only the tables the user may read, as above (one
  ``filter_authorized_dag_ids`` call for all of them).

Not allowed: 403, naming what was needed. Under Airflow's default SimpleAuthManager a
Viewer may read every table and write none; a User (or Op, Admin) may do both.

It also mounts the table status page (:mod:`sleeper_ops.web.status_page`) at ``/sleeper/ui``
behind the same authentication (the UI's cookie) and the same read rules (the index
needs general DAG read access, a table's page read access to that table's DAGs),
linked from the UI's navigation as an external view. The page marks a table whose DAGs
cannot be built with the DAG factory's own check (:func:`~sleeper_ops.orchestration.dag_factory.table_dags_problem`).

It installs :class:`~sleeper_ops.orchestration.backfills.BackfillRefusalMiddleware` in the
API server: a backfill of a maintenance DAG, which Airflow refuses, is answered with one
line saying why and what to do instead.

It registers the dated bulk import DAG's timetable
(:class:`~sleeper_ops.orchestration.dated_timetable.DatedImportTimetable`), which Airflow
serializes only when a plugin names it.

The Sleeper served is opened lazily, once per API server process, from
``SLEEPER_HOME`` (default ``.sleeper``), and closed when the server shuts down.
"""

from __future__ import annotations

from typing import Any, Collection, Optional, Sequence

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sleeper_ops.airflow.dated_timetable import DatedImportTimetable as PreviousPathTimetable
from sleeper_ops.orchestration.backfills import BackfillRefusalMiddleware
from sleeper_ops.orchestration.dag_factory import OPERATIONS, dag_id_for, table_dags_problem
from sleeper_ops.orchestration.dated_timetable import DatedImportTimetable
from sleeper_ops.web.rest import LazySleeper, create_app
from sleeper_ops.web.rest_auth import Access, access_of
from sleeper_ops.web.status_page import EXTERNAL_VIEW as STATUS_EXTERNAL_VIEW
from sleeper_ops.web.status_page import URL_PREFIX as STATUS_URL_PREFIX
from sleeper_ops.web.status_page import create_status_app

URL_PREFIX = "/sleeper/api/v1"
#: Where the authorised user is left on ``request.state`` for the route's own use.
USER_STATE = "airflow_user"

_bearer = HTTPBearer(auto_error=False, description="An Airflow JWT, from the API server's POST /auth/token")


def table_dag_ids(table: str) -> list[str]:
    """The ids of the DAGs generated for ``table``, whose permissions guard it."""
    return [dag_id_for(table, op) for op in OPERATIONS]


async def airflow_user(request: Request,
                       credentials: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> Any:
    """The Airflow user of the request, authenticated by the API server's auth manager;
    raises 401 when there is no valid token or cookie."""
    from airflow.api_fastapi.core_api.security import get_user

    try:
        return await get_user(request=request, _oauth_token=None, bearer_credentials=credentials)
    except HTTPException as e:
        if e.status_code == status.HTTP_403_FORBIDDEN:  # Airflow's answer to an invalid token
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail=e.detail,
                                headers={"WWW-Authenticate": "Bearer"}) from None
        raise


def authorize(user: Any, access: Access) -> None:
    """Raise 403 unless the auth manager lets ``user`` have ``access`` (see the module
    docstring for the rules)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    am = get_auth_manager()
    if access.table is None:
        if access.action == "read":
            allowed = am.is_authorized_dag(method="GET", user=user)
            need = "read access to Airflow DAGs"
        else:
            allowed = am.is_authorized_dag(method="POST", access_entity=DagAccessEntity.RUN, user=user)
            need = "the right to run Airflow DAGs"
    else:
        ids = table_dag_ids(access.table)
        if access.action == "read":
            allowed = am.batch_is_authorized_dag([{"method": "GET", "details": DagDetails(id=i)} for i in ids],
                                                 user=user)
            need = f"read access to the table's DAGs ({', '.join(ids)})"
        else:
            allowed = am.batch_is_authorized_dag(
                [{"method": "POST", "access_entity": DagAccessEntity.RUN, "details": DagDetails(id=i)} for i in ids],
                user=user)
            need = f"the right to run the table's DAGs ({', '.join(ids)})"
    if not allowed:
        what = f"{access.action} table {access.table!r}" if access.table is not None else f"{access.action} tables"
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"not allowed to {what}: that needs {need}")


def _guard(table_param: str) -> Any:
    async def guard(request: Request, user: Any = Depends(airflow_user)) -> Any:
        authorize(user, access_of(request, table_param))
        setattr(request.state, USER_STATE, user)
        return user
    guard.__doc__ = (f"Authenticate the request (401) and authorise it per table (403), the table being the "
                     f"path parameter {table_param!r}.")
    return guard


#: The REST app's dependency: authentication, then per-table authorisation.
rest_auth = _guard("t")
#: The status page's: the same, its table named by the path parameter ``name``.
status_auth = _guard("name")


def readable_tables(request: Request, names: Sequence[str]) -> Collection[str]:
    """Of ``names``, the tables the request's user may read (read access to all of the
    table's DAGs), in one ``filter_authorized_dag_ids`` call."""
    from airflow.api_fastapi.app import get_auth_manager

    user = getattr(request.state, USER_STATE)
    wanted = {name: table_dag_ids(name) for name in names}
    allowed = get_auth_manager().filter_authorized_dag_ids(
        dag_ids={i for ids in wanted.values() for i in ids}, user=user, method="GET")
    return {name for name, ids in wanted.items() if all(i in allowed for i in ids)}


sleeper = LazySleeper()
rest_app = create_app(sleeper, auth_dependency=rest_auth, table_filter=readable_tables)
# The table status page (sleeper_ops.web.status_page), linked from the UI's navigation.
status_app = create_status_app(sleeper, auth_dependency=status_auth, table_filter=readable_tables,
                               dag_problem=table_dags_problem)


class SleeperPlugin(AirflowPlugin):
    """Mounts the Sleeper REST API (and the table status page) in the Airflow API server."""

    name = "sleeper"
    fastapi_apps = [
        {"app": rest_app, "url_prefix": URL_PREFIX, "name": "Sleeper REST API"},
        {"app": status_app, "url_prefix": STATUS_URL_PREFIX, "name": "Sleeper table status"},
    ]
    #: a maintenance DAG's backfill refused in one line saying why (sleeper_ops.orchestration.backfills)
    fastapi_root_middlewares = [{"middleware": BackfillRefusalMiddleware, "args": [], "kwargs": {},
                                 "name": "Sleeper backfill refusal"}]
    external_views: list[dict[str, Any]] = [dict(STATUS_EXTERNAL_VIEW)]
    #: the dated bulk import DAG's timetable: Airflow serializes only timetables a plugin names (and
    #: under the previous release's name, which the DAGs that release serialized give it)
    timetables = [DatedImportTimetable, PreviousPathTimetable]
