"""The Airflow plugin: Sleeper's REST API in the Airflow API server, behind Airflow's auth.

Registered through the ``airflow.plugins`` entry point (pyproject.toml), so an Airflow
that has this package installed loads it; no plugins folder is needed. It mounts the
REST app (:mod:`sleeper_ops.web.rest`) at ``/sleeper/api/v1`` (OpenAPI schema at
``/sleeper/api/v1/openapi.json``, docs at ``/sleeper/api/v1/docs``).

Authentication is Airflow's own: :func:`airflow_user` hands the request to the API
server's ``get_user`` (``airflow.api_fastapi.core_api.security``), which validates the
JWT from ``Authorization: Bearer`` (as issued by ``POST /auth/token``) or the UI's
session cookie with the configured auth manager. No valid token: 401 (Airflow answers
403 for a malformed token; here that is 401 too). A valid user is then checked with
the auth manager's ``is_authorized_custom_view`` on the resource ``Sleeper``, GET for
reads and POST for writes: not allowed, 403.

It also mounts the table status page (:mod:`sleeper_ops.web.status_page`) at ``/sleeper/ui``
behind the same authentication (the UI's cookie), linked from the UI's navigation as an
external view.

The Sleeper served is opened lazily, once per API server process, from
``SLEEPER_HOME`` (default ``.sleeper``), and closed when the server shuts down.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from sleeper_ops.web.rest import LazySleeper, create_app
from sleeper_ops.web.status_page import EXTERNAL_VIEW as STATUS_EXTERNAL_VIEW
from sleeper_ops.web.status_page import URL_PREFIX as STATUS_URL_PREFIX
from sleeper_ops.web.status_page import create_status_app

URL_PREFIX = "/sleeper/api/v1"
#: the auth manager resource that guards the REST API
RESOURCE = "Sleeper"

_bearer = HTTPBearer(auto_error=False, description="An Airflow JWT, from the API server's POST /auth/token")


async def airflow_user(request: Request,
                       credentials: Optional[HTTPAuthorizationCredentials] = Depends(_bearer)) -> Any:
    """The Airflow user of the request, authenticated and authorised by the API server's
    auth manager; raises 401 (not authenticated) or 403 (not allowed)."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.core_api.security import get_user

    try:
        user = await get_user(request=request, _oauth_token=None, bearer_credentials=credentials)
    except HTTPException as e:
        if e.status_code == status.HTTP_403_FORBIDDEN:  # Airflow's answer to an invalid token
            raise HTTPException(status.HTTP_401_UNAUTHORIZED, detail=e.detail,
                                headers={"WWW-Authenticate": "Bearer"}) from None
        raise
    method: Literal["GET", "POST"] = "GET" if request.method in ("GET", "HEAD", "OPTIONS") else "POST"
    if not get_auth_manager().is_authorized_custom_view(method=method, resource_name=RESOURCE, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=f"not allowed to {method} {RESOURCE}")
    return user


sleeper = LazySleeper()
rest_app = create_app(sleeper, auth_dependency=airflow_user)
# The table status page (sleeper_ops.web.status_page), linked from the UI's navigation.
status_app = create_status_app(sleeper, auth_dependency=airflow_user)


class SleeperPlugin(AirflowPlugin):
    """Mounts the Sleeper REST API (and the table status page) in the Airflow API server."""

    name = "sleeper"
    fastapi_apps = [
        {"app": rest_app, "url_prefix": URL_PREFIX, "name": "Sleeper REST API"},
        {"app": status_app, "url_prefix": STATUS_URL_PREFIX, "name": "Sleeper table status"},
    ]
    external_views: list[dict[str, Any]] = [dict(STATUS_EXTERNAL_VIEW)]
