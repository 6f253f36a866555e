"""``GET /metrics``: every readable table's figures in the Prometheus text format
(:mod:`sleeper_ops.web.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from sleeper_ops.metrics import sample_metrics
from sleeper_ops.web.metrics import render
from sleeper_ops.web.rest_auth import readable_tables
from sleeper_ops.web.routes.context import Context

router = APIRouter(tags=["tables"])


@router.get("/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics(request: Request, ctx: Context) -> Response:
    """Every readable table's figures in the Prometheus text format (label ``table``)."""
    sleeper = ctx.sleeper()
    infos = sleeper.tables()
    infos = readable_tables(request, infos, ctx.table_filter)
    figures = {i.name: sample_metrics(sleeper.state_store, i) for i in infos}
    return Response(render(figures), media_type=CONTENT_TYPE_LATEST)
