"""Query parameters a route does not declare are refused, never ignored.

:func:`refuse_unknown_query_params` is a dependency of the whole REST app
(:func:`sleeper_ops.web.rest.create_app`): it runs after routing, reads the query
parameters the matched route declares (its own and its dependencies', by their
aliases, e.g. ``min``, ``next``) and answers 422 naming every other one, so a typo
(``?limt=5``, ``?asof=3``) fails instead of silently reading something else. Routes
outside the REST API's own (the OpenAPI schema, the docs) are left alone.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute


def declared_query_params(dependant: Any) -> set[str]:
    """The query parameter names (aliases) ``dependant`` and its dependencies read."""
    names = {getattr(p, "alias", None) or p.name for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= declared_query_params(sub)
    return names


async def refuse_unknown_query_params(request: Request) -> None:
    """Raise a validation error (422, one message) naming each query parameter the
    route does not declare, with the ones it does."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = declared_query_params(route.dependant)
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        expected = ", ".join(sorted(known)) or "none"
        raise RequestValidationError([{"loc": ("query", name), "type": "unknown_parameter",
                                       "msg": f"unknown parameter (this route takes: {expected})"}
                                      for name in unknown])
