"""Every dependency of the REST app's routes is a coroutine function: FastAPI runs a plain
function's dependency in a worker thread (a hand-off there and back per request, the
cost of which grows with the machine's load), so only a route itself, which reads the
state store and files, may be one (sleeper_ops.web.routes.context.rest_context)."""

from __future__ import annotations

from typing import Any, Iterator

from fastapi.routing import APIRoute

from sleeper_ops.web.rest import create_app


async def _allow_all() -> None:
    """An auth dependency that refuses nothing."""


def _dependencies(dependant: Any) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub
        yield from _dependencies(sub)


def test_no_rest_dependency_runs_in_a_worker_thread() -> None:
    app = create_app(lambda: None, auth_dependency=_allow_all)
    checked = set()
    for route in app.routes:
        if not isinstance(route, APIRoute) or not route.path.startswith("/tables"):
            continue
        for dep in _dependencies(route.dependant):
            # what FastAPI itself asks to decide whether to await it or run it in a thread
            assert dep.is_coroutine_callable, \
                f"{route.path}: the dependency {dep.call!r} is a plain function (FastAPI runs it in a worker thread)"
            checked.add(getattr(dep.call, "__name__", repr(dep.call)))
    assert {"rest_context", "refuse_unknown_query_params", "_allow_all"} <= checked
