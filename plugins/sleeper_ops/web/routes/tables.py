"""The tables: ``GET /tables``, ``/tables/{t}`` and a table's ``/partitions`` (paged),
``/files`` (paged) and ``/jobs`` (:mod:`sleeper_ops.web.rest`)."""

from __future__ import annotations

from typing import Any, Optional

from fastapi import APIRouter, Query, Request

from sleeper_ops.errors import QueryError
from sleeper_ops.web.rest_auth import readable_tables
from sleeper_ops.web.rest_models import FilesOut, JobOut, PartitionsOut, TableOut
from sleeper_ops.web.rest_pages import DEFAULT_PAGE, MAX_PAGE, after_of, next_token
from sleeper_ops.web.routes.context import Context
from statestore.catalog import TableInfo
from statestore.jobs import JOB_KINDS

router = APIRouter(tags=["tables"])
_LIMIT_HELP = "the most entries in this page"
_NEXT_HELP = "the 'next' of the previous page (absent: the first page)"


def _table_out(info: TableInfo) -> TableOut:
    return TableOut(name=info.name, table_id=info.table_id, online=info.online, schema=info.schema.to_dict(),
                    properties=info.all_properties(), properties_set=sorted(info.properties))


@router.get("/tables", response_model=list[TableOut])
def list_tables(request: Request, ctx: Context) -> list[TableOut]:
    """Every table the requester may read, by name."""
    infos = ctx.sleeper().tables()
    infos = readable_tables(request, infos, ctx.table_filter)
    return [_table_out(info) for info in infos]


@router.get("/tables/{t}", response_model=TableOut)
def describe_table(t: str, ctx: Context) -> TableOut:
    """One table: schema, online flag and every property with its default."""
    return _table_out(ctx.table(t).info)


@router.get("/tables/{t}/partitions", response_model=PartitionsOut)
def partitions(t: str, ctx: Context, limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description=_LIMIT_HELP),
               next_: Optional[str] = Query(None, alias="next", description=_NEXT_HELP)) -> dict[str, Any]:
    """The partition tree, depth first, with the files and records of each
    partition, a page at a time (read from the table's overview: counts, not files)."""
    from sleeper_ops.reports import partitions_report

    tb = ctx.table(t)
    after = after_of("partitions", next_)
    rows = partitions_report(tb.sleeper.state_store.overview(tb.info.table_id, file_limit=0))
    start = 0 if after is None else next((i + 1 for i, r in enumerate(rows) if r["id"] == after), len(rows))
    page = rows[start:start + limit]
    more = start + limit < len(rows)
    return {"partitions": page, "next": next_token("partitions", page[-1]["id"]) if more and page else None}


@router.get("/tables/{t}/files", response_model=FilesOut)
def files(t: str, ctx: Context, limit: int = Query(DEFAULT_PAGE, ge=1, le=MAX_PAGE, description=_LIMIT_HELP),
          next_: Optional[str] = Query(None, alias="next", description=_NEXT_HELP)) -> dict[str, Any]:
    """Tracked files by name with their references (none: awaiting garbage
    collection), a page at a time: only the page is read where the state store allows."""
    from sleeper_ops.reports import file_entries

    tb = ctx.table(t)
    got = tb.sleeper.state_store.file_page(tb.info.table_id, after=after_of("files", next_), limit=limit + 1)
    page = got[:limit]
    more = len(got) > limit
    return {"files": file_entries(page), "next": next_token("files", page[-1].filename) if more else None}


@router.get("/tables/{t}/jobs", response_model=list[JobOut])
def jobs(t: str, ctx: Context, kind: Optional[str] = Query(None, description=f"one of {', '.join(JOB_KINDS)}"),
         limit: int = Query(1000, ge=1, le=100_000)) -> list[dict[str, Any]]:
    """Job status records (compaction, split, ingest, ...), newest first."""
    from sleeper_ops.reports import jobs_report

    if kind is not None and kind not in JOB_KINDS:
        raise QueryError(f"unknown job kind {kind!r}; expected one of {', '.join(JOB_KINDS)}")
    return jobs_report(ctx.table(t).jobs(kind=kind, limit=limit))
