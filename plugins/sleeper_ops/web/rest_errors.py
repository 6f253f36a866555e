"""The REST API's errors (:mod:`sleeper_ops.web.rest`): which HTTP status each of our
errors gets, the body of an error answer (a write's 503 says whether its outcome is
unknown), and FastAPI's validation errors as one message naming each parameter."""

from __future__ import annotations

from typing import Any, Sequence

from fastapi import Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from sleeper_ops.errors import IngestError, QueryError, StorageError
from statestore.client_writes import IdempotencyKeyError, IdempotencyKeyReusedError
from statestore.errors import (
    BufferFullError,
    CommitConflictError,
    PropertyError,
    SchemaError,
    SleeperError,
    StateStoreUnavailableError,
    TableNotFoundError,
)
from statestore.ingest_requests import IngestRequestError

# ----- errors -------------------------------------------------------------------------
_STATUS: list[tuple[type[SleeperError], int]] = [
    (TableNotFoundError, status.HTTP_404_NOT_FOUND),
    (BufferFullError, status.HTTP_429_TOO_MANY_REQUESTS),
    (IdempotencyKeyReusedError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (IdempotencyKeyError, status.HTTP_400_BAD_REQUEST),
    (IngestError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (IngestRequestError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (SchemaError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (PropertyError, status.HTTP_422_UNPROCESSABLE_CONTENT),
    (QueryError, status.HTTP_400_BAD_REQUEST),
    (CommitConflictError, status.HTTP_409_CONFLICT),
    (StateStoreUnavailableError, status.HTTP_503_SERVICE_UNAVAILABLE),
    (StorageError, status.HTTP_503_SERVICE_UNAVAILABLE),
]


def status_of(error: SleeperError) -> int:
    """The HTTP status for one of our errors (400 unless a more specific one applies)."""
    for cls, code in _STATUS:
        if isinstance(error, cls):
            return code
    return status.HTTP_400_BAD_REQUEST


#: the methods that write: their 503 says ``outcome``
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def error_body(error: SleeperError, method: str) -> dict[str, str]:
    """The JSON body of an error answer. A write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) that fails with 503 also
    says its ``outcome``: ``unknown`` when the state store was lost while the write may
    have been stored (send it again with the same ``Idempotency-Key``: a repeat is
    stored once), ``not_stored`` when it failed before anything was stored (the object
    store could not be read)."""
    body = {"detail": str(error)}
    if method in WRITES and status_of(error) == status.HTTP_503_SERVICE_UNAVAILABLE:
        if isinstance(error, StateStoreUnavailableError):
            body.update(outcome="unknown", retry="send the same request again with the same Idempotency-Key")
        else:
            body.update(outcome="not_stored", retry="send the request again")
    return body


async def sleeper_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SleeperError)
    return JSONResponse(error_body(exc, request.method), status_code=status_of(exc))


_PLACES = {"query": "query parameter", "path": "path parameter", "header": "header", "cookie": "cookie"}


def validation_message(errors: Sequence[Any]) -> str:
    """FastAPI's validation errors as one message: ``where: what`` for each, e.g.
    ``query parameter limit: Input should be greater than or equal to 1``."""
    parts = []
    for e in errors:
        loc = [str(x) for x in e.get("loc", ())]
        if loc and loc[0] in _PLACES:
            where = f"{_PLACES[loc[0]]} {'.'.join(loc[1:])}".strip()
        elif loc and loc[0] == "body":
            where = "body" + "".join(f"[{x}]" if x.isdigit() else f".{x}" for x in loc[1:])
        else:
            where = ".".join(loc) or "request"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": validation_message(exc.errors())},
                        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT)
