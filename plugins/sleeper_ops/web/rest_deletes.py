"""``DELETE /tables/{t}/records``: delete records by key or range (issue 22;
:mod:`sleeper_ops.maintenance.deletes`). Like every method but GET, it needs the right
to run the table's DAGs (:mod:`sleeper_ops.web.rest_auth`)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from fastapi import FastAPI, Header, Query
from pydantic import BaseModel

from sleeper_ops.errors import QueryError

_DELETE_KEY_HELP = ("an idempotency key (1-255 printable ASCII characters), kept with the delete's keys, range and "
                    "where: the same request again adds no second delete (answers the first tombstone, "
                    "applied=false); another request with the key is 422")


class DeleteOut(BaseModel):
    """A delete's answer: its tombstone's number (for a repeat of an idempotency key,
    the first delete's), whether this request applied it, and the buffer sequence
    number it covers."""

    tombstone: Optional[int]
    applied: bool
    buffer_seq: int


def add_delete_routes(app: FastAPI, table: Callable[[str], Any],
                      parse_range: Callable[[Any, Optional[str], Optional[str]], Any]) -> None:
    """Add ``DELETE /tables/{t}/records`` to ``app`` (``table`` opens a table by name)."""

    @app.delete("/tables/{t}/records", response_model=DeleteOut, tags=["ingest"])
    def delete_records(t: str,
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
        from sleeper_ops.io.codec import parse_key

        tb = table(t)
        if not key and lo is None and hi is None:
            raise QueryError("give at least one key=... or a range min=...&max=...")
        try:
            keys = [parse_key(tb.schema, k) for k in key]
            ranges = [] if lo is None and hi is None else [parse_range(tb.schema, lo, hi)]
        except RecursionError:
            raise QueryError("a key or range value is JSON nested too deeply") from None
        r = tb.delete(keys=keys, ranges=ranges, where=where, request_id=idempotency_key)
        return DeleteOut(tombstone=r.tombstone, applied=r.applied, buffer_seq=r.buffer_seq)
