"""The bodies of the REST API (:mod:`sleeper_ops.web.rest`): what its routes take and
return, as pydantic models, so the OpenAPI schema documents them."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

#: the ``Idempotency-Key`` header of the routes that write (a delete has its own words)
IDEMPOTENCY_KEY_HELP = (
    "an idempotency key (1-255 printable ASCII characters): a request sent again with the same key and "
    "body within sleeper.table.write.idempotency.hours stores nothing and gets the first answer; the same "
    "key with another body is refused (422)")


class ErrorOut(BaseModel):
    detail: str
    outcome: Optional[str] = Field(None, description="a write's 503 only: unknown (send it again with the same "
                                                     "Idempotency-Key) or not_stored")
    retry: Optional[str] = None


class TableOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    table_id: str
    online: bool
    schema_: dict[str, Any] = Field(alias="schema", description="Sleeper's schema JSON")
    properties: dict[str, Optional[str]] = Field(description="every property: the set value, else the default")
    properties_set: list[str] = Field(description="names of the properties set explicitly")


class RangeOut(BaseModel):
    field: str
    min: Any = Field(description="inclusive; bytes as {\"b64\": ...}")
    max: Any = Field(description="exclusive; null is unbounded")


class PartitionOut(BaseModel):
    id: str
    parent: Optional[str]
    depth: int
    leaf: bool
    children: list[str]
    split_dimension: int
    region: list[RangeOut]
    files: int
    records: int
    records_approximate: bool


class ReferenceOut(BaseModel):
    partition: str
    records: int
    approximate: bool
    whole_file: bool
    job_id: Optional[str]


class FileOut(BaseModel):
    filename: str
    update_time: int
    references: list[ReferenceOut] = Field(description="none: awaiting garbage collection")


class PartitionsOut(BaseModel):
    partitions: list[PartitionOut]
    next: Optional[str] = Field(None, description="pass as ?next= for the following page; null: the last page")


class FilesOut(BaseModel):
    files: list[FileOut]
    next: Optional[str] = Field(None, description="pass as ?next= for the following page; null: the last page")


class JobOut(BaseModel):
    table_id: str
    job_id: str
    kind: str
    status: str
    partition_id: Optional[str] = None
    input_files: int = 0
    created_ms: int = 0
    started_ms: Optional[int] = None
    finished_ms: Optional[int] = None
    committed_ms: Optional[int] = None
    rows_read: int = 0
    rows_written: int = 0
    reason: Optional[str] = None
    run_id: Optional[str] = None
    attempts: int = 0
    output: Optional[str] = None
    duration_s: Optional[float] = None
    rate: Optional[float] = Field(None, description="rows read per second")


class IngestRequestOut(BaseModel):
    request_id: str
    table_id: str
    filename: str
    size_bytes: int
    received_ms: int
    status: str
    job_id: Optional[str] = None
    attempts: int = 0
    last_error: Optional[str] = None


class IngestRequestsIn(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"files": ["s3://bucket/ingest/part-0.parquet"]}]})

    files: list[str] = Field(min_length=1, description="absolute local paths (on the server) or s3:// URIs, each "
                                                       "under one of the allowed ingest prefixes")


class IngestRequestsOut(BaseModel):
    requests: list[IngestRequestOut]


class RecordsIn(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [{"records": [{"key": "abc", "ts": 1}]}]})

    records: list[dict[str, Any]] = Field(min_length=1, description="one object per record, every key field set")


class WriteOut(BaseModel):
    records: int
    seq: int = Field(description="the write's sequence number in the table's write buffer")
    seconds: float


class RecordsOut(BaseModel):
    """Streamed in this order: the records as they are read, then ``count`` and ``truncated``."""

    records: list[dict[str, Any]] = Field(description="in key order: row keys, then sort keys")
    count: int = Field(description="records in ``records``")
    truncated: bool = Field(description="more records matched than the limit")


class DeleteOut(BaseModel):
    """A delete's answer: its tombstone's number (for a repeat of an idempotency key,
    the first delete's), whether this request applied it, and the buffer sequence
    number it covers."""

    tombstone: Optional[int]
    applied: bool
    buffer_seq: int
