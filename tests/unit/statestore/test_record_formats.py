"""The state store's records serialise to JSON in a fixed format, pinned by golden files
byte for byte (key order included): file references, partitions, tombstones, job
records, ingest requests, history summaries and a DynamoDB snapshot of a table's state.
A format changes only by adding a new golden file beside the old one; every golden
file must still read back to its example. ``SLEEPER_UPDATE_GOLDEN=1`` writes missing ones.
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Callable

import pytest

from statestore.deletes import Tombstone
from statestore.files import FileRecord, FileReference
from statestore.history import TransactionSummary
from statestore.ingest_requests import IngestRequest
from statestore.jobs import JobRecord
from statestore.partitions import ROOT_ID, Partition, root_region, split_children
from statestore.schema import Schema
from statestore.state import TableState

GOLDEN = Path(__file__).parent / "golden" / "records"
UPDATE = os.environ.get("SLEEPER_UPDATE_GOLDEN") == "1"

BYTES_KEY = Schema.from_dict({"rowKeyFields": [{"name": "b", "type": "ByteArrayType"},
                                               {"name": "n", "type": "LongType"}]})
_TREE = split_children(Partition(ROOT_ID, root_region(BYTES_KEY)), 0, b"\x00\xff", "left", "right")
_REGIONS = (_TREE[1].region, _TREE[2].region)


def _state() -> TableState:
    state = TableState()
    state.partitions = {p.id: p for p in _TREE}
    for ref in (FileReference("a.parquet", "left", 10, update_time=5),
                FileReference("a.parquet", "right", 4, True, False, "job-1", 6, 2),
                FileReference("b.parquet", "right", 7, update_time=7)):
        state.put_reference(ref)
    state.files = {"a.parquet": FileRecord("a.parquet", 6), "b.parquet": FileRecord("b.parquet", 7),
                   "gone.parquet": FileRecord("gone.parquet", 3)}
    state.tombstones = {2: Tombstone(2, _REGIONS, "n > 1", 3, 1_700_000_000_000)}
    state.delete_count = 2
    return state


def _snapshot_json(state: TableState) -> Any:
    from statestore.dynamodb.snapshots import encode_state

    return json.loads(zlib.decompress(encode_state(state)))


def _snapshot_back(doc: Any) -> TableState:
    from statestore.dynamodb.snapshots import decode_state

    return decode_state(zlib.compress(json.dumps(doc, separators=(",", ":")).encode()))


#: name -> (example, to JSON, from JSON)
EXAMPLES: dict[str, tuple[Any, Callable[[Any], Any], Callable[[Any], Any]]] = {
    "file_reference": (FileReference("s3://b/t/a.parquet", "left", 100, True, False, "job-1", 1_700_000_000_000),
                       FileReference.to_dict, FileReference.from_dict),
    "file_reference_with_horizon": (FileReference("a.parquet", "p", 3, delete_horizon=4),
                                    FileReference.to_dict, FileReference.from_dict),
    "partition_root": (_TREE[0], Partition.to_dict, Partition.from_dict),
    "partition_leaf": (_TREE[1], Partition.to_dict, Partition.from_dict),
    "tombstone": (Tombstone(3, _REGIONS, "n > 3 AND b <> X'00'", 41, 1_700_000_000_004),
                  Tombstone.to_dict, Tombstone.from_dict),
    "job_record": (JobRecord("t1", "job-1", "compaction", "committed", "left", 2, 1_700_000_000_000,
                             1_700_000_000_001, 1_700_000_000_002, 1_700_000_000_003, 30, 28, None, "dag/run-1", 1,
                             "out.parquet", ("out.parquet", "out.sketches"), 1_700_000_000_002),
                   JobRecord.to_dict, JobRecord.from_dict),
    "job_record_failed": (JobRecord("t1", "job-2", "ingest", "failed", None, 0, 1, reason="disk full"),
                          JobRecord.to_dict, JobRecord.from_dict),
    "ingest_request": (IngestRequest("r-1", "t1", "s3://raw/a.jsonl", 123, 1_700_000_000_000, "failed", "job-9", 3,
                                     "unreadable"), IngestRequest.to_dict, IngestRequest.from_dict),
    "transaction_summary": (TransactionSummary(7, 1_700_000_000_000, "replace_file_references", 1, 2, 30, 28,
                                               "job-1", "a note"), TransactionSummary.to_dict,
                            TransactionSummary.from_dict),
    "snapshot": (_state(), _snapshot_json, _snapshot_back),
}


def _text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_record_serialises_byte_for_byte_as_its_golden_file(name: str) -> None:
    example, to_json, _ = EXAMPLES[name]
    path = GOLDEN / f"{name}.json"
    produced = to_json(example)
    if UPDATE and not path.exists():
        path.write_text(_text(produced))
    assert _text(produced) == path.read_text(), f"format of {name} changed; see {path}"
    compact = json.dumps(produced, separators=(",", ":"))
    assert compact == json.dumps(json.loads(path.read_text()), separators=(",", ":"))


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_golden_record_reads_back_to_an_equal_record(name: str) -> None:
    example, _, from_json = EXAMPLES[name]
    assert from_json(json.loads((GOLDEN / f"{name}.json").read_text())) == example


def test_a_reference_without_a_horizon_keeps_the_form_written_before_deletes() -> None:
    assert "delete_horizon" not in FileReference("f", "p", 3).to_dict()
    assert FileReference.from_dict({"filename": "f", "partition_id": "p", "record_count": 3,
                                    "count_approximate": False, "whole_file": True, "job_id": None,
                                    "update_time": 0}) == FileReference("f", "p", 3)


def test_older_forms_read_with_their_defaults() -> None:
    """Fields added later are absent from what older releases wrote."""
    assert Tombstone.from_dict({"number": 1, "regions": []}) == Tombstone(1, ())
    assert TransactionSummary.from_dict({"number": 4, "time_ms": 5, "kind": "add_files"}) \
        == TransactionSummary(4, 5, "add_files")
