"""A backfill of a Sleeper maintenance DAG, refused in one line saying why.

The maintenance DAGs (split, compaction, GC, ingest batcher, flush) allow every run type
but backfill (``allowed_run_types``), so Airflow itself refuses a backfill and creates no
run. Its answer names only the DAG (``Dag with dag_id: '...' does not allow backfill
runs``; for a DAG without a schedule, ``... has a non-periodic schedule that does not
support backfills``, a ``422``, which the dry run checks first).
:class:`BackfillRefusalMiddleware`, which the Sleeper plugin installs in the API server,
replaces that ``detail`` of the answer of ``POST /api/v2/backfills`` and ``POST
/api/v2/backfills/dry_run`` (what the UI's backfill dialog calls), keeping its status, with
:func:`sleeper_ops.orchestration.dag_problems.backfill_refusal`: which DAG, that
maintenance works on the table's current state, and to trigger a run now instead. Every
other request and answer passes untouched, and so does the refusal of any other DAG.
"""

from __future__ import annotations

import json
import re
from typing import Any, Awaitable, Callable, MutableMapping, Optional

from sleeper_ops.orchestration.dag_factory import DAG_ID_PREFIX, OPERATIONS
from sleeper_ops.orchestration.dag_problems import backfill_refusal

Message = MutableMapping[str, Any]
Send = Callable[[Message], Awaitable[None]]
PATHS = ("/api/v2/backfills", "/api/v2/backfills/dry_run")
#: Airflow's refusals (``airflow.models.backfill``): ``DagRunTypeNotAllowed`` (400), and for a DAG
#: with no schedule (``sleeper.table.schedule.<operation>=none``) ``DagNonPeriodicScheduleException``
#: (422), which the dry run checks first
AIRFLOW_REFUSALS = (re.compile(r"^Dag with dag_id: '([^']+)' does not allow backfill runs$"),
                    re.compile(r"^(\S+) has a non-periodic schedule that does not support backfills$"))
STATUSES = (400, 422)


def refusal_for(dag_id: str) -> Optional[str]:
    """The refusal of a generated maintenance DAG's id (``sleeper_<table>_<operation>``),
    None for any other DAG."""
    for operation in OPERATIONS:
        suffix = f"_{operation}"
        if dag_id.startswith(DAG_ID_PREFIX) and dag_id.endswith(suffix) and len(dag_id) > len(DAG_ID_PREFIX + suffix):
            return backfill_refusal(dag_id, dag_id[len(DAG_ID_PREFIX):-len(suffix)], operation)
    return None


def rewritten(body: bytes) -> Optional[bytes]:
    """The answer's body with the refusal in place of Airflow's, or None to keep it."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    detail = answer.get("detail") if isinstance(answer, dict) else None
    matches = [m for m in (p.match(detail) for p in AIRFLOW_REFUSALS) if m] if isinstance(detail, str) else []
    refusal = refusal_for(matches[0].group(1)) if matches else None
    return None if refusal is None else json.dumps({**answer, "detail": refusal}).encode()


class BackfillRefusalMiddleware:
    """ASGI middleware (see the module docstring): holds back only the ``400`` and ``422``
    answers of :data:`PATHS` to ``POST``, to rewrite them (the status is kept)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Message, receive: Callable[[], Awaitable[Message]], send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or not str(scope.get("path", "")).endswith(PATHS):
            await self.app(scope, receive, send)
            return
        start: Message = {}
        chunks: list[bytes] = []

        async def hold(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") in STATUSES:
                start.update(message)  # held until the body is known
                return
            if not start or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            new = rewritten(body)
            if new is not None:
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                start["headers"] = [*headers, (b"content-length", str(len(new)).encode())]
                body = new
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, hold)
