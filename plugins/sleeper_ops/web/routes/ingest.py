"""Ingest requests: ``POST /tables/{t}/ingest-requests`` queues files for the table's
ingest batcher, ``GET`` lists them (:mod:`sleeper_ops.web.rest`)."""

from __future__ import annotations

from typing import Optional

from fastapi import APIRouter, Header, Query, status

from sleeper_ops.web.rest_models import IDEMPOTENCY_KEY_HELP, IngestRequestOut, IngestRequestsIn, IngestRequestsOut
from sleeper_ops.web.rest_paths import check_ingest_paths
from sleeper_ops.web.routes.context import Context
from statestore.ingest_requests import INGEST_REQUEST_STATUSES

router = APIRouter(tags=["ingest"])


@router.post("/tables/{t}/ingest-requests", response_model=IngestRequestsOut, status_code=status.HTTP_202_ACCEPTED)
def submit(t: str, body: IngestRequestsIn, ctx: Context,
           idempotency_key: Optional[str] = Header(None, description=IDEMPOTENCY_KEY_HELP)) -> IngestRequestsOut:
    """Queue files for the table's ingest batcher. Refused whole (422, nothing queued)
    if any file is outside the allowed ingest prefixes, missing or of an unknown type.
    Local paths are queued resolved (symbolic links and ``..`` followed). A repeat
    with the same ``Idempotency-Key`` and files queues nothing and answers with the
    requests the first one queued."""
    from sleeper_ops.ingest.batcher import submit_ingest_requests

    sleeper = ctx.table(t).sleeper  # 404 before anything else
    files = check_ingest_paths(body.files, ctx.allowed_prefixes(sleeper), ctx.table_areas(sleeper))
    reqs = submit_ingest_requests(sleeper, t, files, request_id=idempotency_key)
    return IngestRequestsOut(requests=[IngestRequestOut(**r.to_dict()) for r in reqs])


@router.get("/tables/{t}/ingest-requests", response_model=list[IngestRequestOut])
def ingest_requests(t: str, ctx: Context,
                    status_: Optional[str] = Query(None, alias="status",
                                                   description=", ".join(INGEST_REQUEST_STATUSES)),
                    limit: int = Query(1000, ge=1, le=100_000)) -> list[IngestRequestOut]:
    """The table's ingest requests, oldest first."""
    tb = ctx.table(t)
    reqs = tb.sleeper.state_store.list_ingest_requests(tb.info.table_id, status=status_, limit=limit)
    return [IngestRequestOut(**r.to_dict()) for r in reqs]
