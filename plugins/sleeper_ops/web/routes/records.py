"""Records: ``POST /tables/{t}/records`` writes them into the write buffer, ``GET`` reads
them by key or range (streamed), ``DELETE`` deletes them by key or range in one commit
(:mod:`sleeper_ops.maintenance.deletes`; like every method but GET it needs the right to
run the table's DAGs, :mod:`sleeper_ops.web.rest_auth`). See :mod:`sleeper_ops.web.rest`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator, Optional

from fastapi import APIRouter, Header, Query, status
from fastapi.responses import Response, StreamingResponse

from sleeper_ops.errors import QueryError
from sleeper_ops.web.rest_models import IDEMPOTENCY_KEY_HELP, DeleteOut, RecordsIn, RecordsOut, WriteOut
from sleeper_ops.web.rest_records import in_threads, prepended, records_body
from sleeper_ops.web.routes.context import Context
from statestore.errors import TableNotFoundError
from statestore.schema import Schema

if TYPE_CHECKING:
    import pyarrow as pa

    from sleeper_ops.table import Table

router = APIRouter()
#: The largest ``limit`` of a record read (the body is streamed: memory does not grow with it).
MAX_RECORDS_OUT = 1_000_000_000
DEFAULT_RECORDS_OUT = 10_000
_DELETE_KEY_HELP = ("an idempotency key (1-255 printable ASCII characters), kept with the delete's keys, range and "
                    "where: the same request again adds no second delete (answers the first tombstone, "
                    "applied=false); another request with the key is 422")


def _keys_and_ranges(schema: Schema, key: list[str], lo: Optional[str],
                     hi: Optional[str]) -> tuple[list[Any], list[tuple[Any, Optional[Any]]]]:
    """The keys (JSON values) and the range ``[lo, hi)`` (an absent or null end is
    unbounded) of a request; refused without any."""
    from sleeper_ops.io.codec import parse_key, parse_range

    if not key and lo is None and hi is None:
        raise QueryError("give at least one key=... or a range min=...&max=...")
    try:
        keys = [parse_key(schema, k) for k in key]
        ranges = [] if lo is None and hi is None else [
            parse_range(schema, "null" if lo is None else lo, "null" if hi is None else hi)]
    except RecursionError:
        raise QueryError("a key or range value is JSON nested too deeply") from None
    return keys, ranges


@router.post("/tables/{t}/records", response_model=WriteOut, status_code=status.HTTP_201_CREATED, tags=["ingest"])
def write_records(t: str, body: RecordsIn, ctx: Context,
                  idempotency_key: Optional[str] = Header(None, description=IDEMPOTENCY_KEY_HELP)) -> WriteOut:
    """Store the records in the table's write buffer: 201 only once they are durable
    (queries see them at once; a flush files them), all of them or (422) none; 429
    when the buffer is full (nothing stored: send them again after a flush). A
    repeat with the same ``Idempotency-Key`` and records stores nothing and answers
    with the first write's ``seq``."""
    result = ctx.table(t).write(body.records, request_id=idempotency_key)
    return WriteOut(records=result.records, seq=result.seq, seconds=result.seconds)


@router.get("/tables/{t}/records", response_model=RecordsOut, tags=["query"])
def read_records(t: str, ctx: Context,
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
    def planned(tb: Table[Any], by_name: bool) -> Generator[pa.RecordBatch, None, None]:
        keys, ranges = _keys_and_ranges(tb.schema, key, lo, hi)
        if as_of is not None and buffer:
            raise QueryError("as_of reads exclude the write buffer: leave out buffer=true")
        # one more than the limit: truncated or not
        return tb.query_batches(keys=keys, ranges=ranges, limit=limit + 1, buffer=buffer is not False,
                                as_of=as_of, by_name=by_name)

    # The table this process last found by the name, checked by the query's own read of its
    # catalog entry (no round trip of its own); renamed, deleted or refused: looked up again.
    tb, kept = ctx.kept_table(t) if as_of is None else (ctx.table(t), False)
    try:
        batches = planned(tb, kept)
    except (TableNotFoundError, QueryError):
        if not kept:
            raise
        batches = planned(ctx.table(t), False)
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


@router.delete("/tables/{t}/records", response_model=DeleteOut, tags=["ingest"])
def delete_records(t: str, ctx: Context,
                   key: list[str] = Query([], description="a key as JSON; repeatable"),
                   lo: Optional[str] = Query(None, alias="min", description="range start (inclusive), JSON"),
                   hi: Optional[str] = Query(None, alias="max", description="range end (exclusive), JSON; "
                                                                            "null or absent: unbounded"),
                   where: Optional[str] = Query(None, description="an SQL predicate on any fields"),
                   idempotency_key: Optional[str] = Header(None, description=_DELETE_KEY_HELP)) -> DeleteOut:
    """Delete the records with any of the keys or in the range (and matching
    ``where``) written before this request, in one commit: hidden from every read
    once this answers, purged from files by compaction. 400 for an empty or inverted
    range or an unknown field in ``where`` (nothing deleted); 422 for an
    ``Idempotency-Key`` used for another request; a 503 says ``outcome``."""
    tb = ctx.table(t)
    keys, ranges = _keys_and_ranges(tb.schema, key, lo, hi)
    r = tb.delete(keys=keys, ranges=ranges, where=where, request_id=idempotency_key)
    return DeleteOut(tombstone=r.tombstone, applied=r.applied, buffer_seq=r.buffer_seq)
