"""Transactions serialise to JSON in a fixed format, pinned by golden files.

One golden file per transaction type under ``golden/``: a format change fails here
until the golden file is rewritten on purpose, with ``SLEEPER_UPDATE_GOLDEN=1``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from statestore import (
    AddFiles,
    AssignJobIds,
    ClearFiles,
    DeleteFiles,
    DeleteRecords,
    DropFileReferences,
    DropTombstones,
    FileReference,
    InitialisePartitions,
    JobAssignment,
    Partition,
    ReplaceFileReferences,
    Schema,
    SplitFileReference,
    SplitFileReferences,
    SplitPartition,
    Transaction,
    TransactionError,
    transaction_from_dict,
)
from statestore.partitions import ROOT_ID, root_region, split_children
from statestore.transactions import TRANSACTION_TYPES, transaction_to_dict

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SLEEPER_UPDATE_GOLDEN") == "1"

BYTES_KEY = Schema.from_dict({"rowKeyFields": [{"name": "b", "type": "ByteArrayType"},
                                               {"name": "n", "type": "LongType"}]})
STRING_KEY = Schema.from_dict({"rowKeyFields": [{"name": "s", "type": "StringType"}]})
_BYTES_TREE = split_children(Partition(ROOT_ID, root_region(BYTES_KEY)), 0, b"\x00\xff", "left", "right")

EXAMPLES: dict[str, Transaction] = {
    "initialise_partitions": InitialisePartitions(_BYTES_TREE),
    "split_partition": SplitPartition(*split_children(Partition("p1", root_region(STRING_KEY), None), 0, "mé",
                                                      "p1-left", "p1-right")),
    "add_files": AddFiles((FileReference("s3://b/t/a.parquet", "left", 100),
                           FileReference("s3://b/t/b.parquet", "right", 7, True, False)), 1_700_000_000_000),
    "split_file_references": SplitFileReferences((SplitFileReference("f1", "root", (
        FileReference("f1", "left", 60, True, False), FileReference("f1", "right", 40, True, False))),),
        1_700_000_000_001),
    "assign_job_ids": AssignJobIds((JobAssignment("job-1", "left", ("a", "b")),
                                    JobAssignment("job-2", "right", ("c",))), 1_700_000_000_002),
    "replace_file_references": ReplaceFileReferences("job-1", "left", ("a", "b"),
                                                     FileReference("out", "left", 200), 1_700_000_000_003),
    "delete_files": DeleteFiles(("a", "b")),
    "clear_files": ClearFiles(),
    "delete_records": DeleteRecords((_BYTES_TREE[1].region, _BYTES_TREE[2].region), "n > 3 AND b <> X'00'", 41,
                                    1_700_000_000_004),
    "drop_tombstones": DropTombstones((1, 3)),
    "drop_file_references": DropFileReferences((("a", "left"), ("a", "right"), ("b", "left")), 1_700_000_000_005),
}


def test_every_transaction_type_has_an_example_and_a_golden_file():
    assert set(EXAMPLES) == set(TRANSACTION_TYPES)
    assert {p.stem for p in GOLDEN.glob("*.json")} == set(TRANSACTION_TYPES)


@pytest.mark.parametrize("type_name", sorted(EXAMPLES))
def test_transaction_serialises_exactly_as_its_golden_file(type_name):
    txn = EXAMPLES[type_name]
    path = GOLDEN / f"{type_name}.json"
    produced = json.loads(json.dumps(transaction_to_dict(txn)))  # must be plain JSON
    if UPDATE:
        path.write_text(json.dumps(produced, indent=2, ensure_ascii=False) + "\n")
    assert produced == json.loads(path.read_text()), f"format of {type_name} changed; see {path}"
    assert produced["type"] == type_name


@pytest.mark.parametrize("type_name", sorted(EXAMPLES))
def test_transaction_serialises_byte_for_byte_as_its_golden_file(type_name):
    """Key order included: a log body or history row written today is the same bytes."""
    produced = json.dumps(transaction_to_dict(EXAMPLES[type_name]), indent=2, ensure_ascii=False) + "\n"
    assert produced == (GOLDEN / f"{type_name}.json").read_text(), f"bytes of {type_name} changed"


@pytest.mark.parametrize("type_name", sorted(EXAMPLES))
def test_golden_file_reads_back_to_an_equal_transaction(type_name):
    raw = json.loads((GOLDEN / f"{type_name}.json").read_text())
    txn = transaction_from_dict(raw)
    assert type(txn) is type(EXAMPLES[type_name])
    assert txn == EXAMPLES[type_name]


def test_replace_without_output_round_trips():
    txn = ReplaceFileReferences("j", "p", ("a",), None, 5)
    assert transaction_from_dict(json.loads(json.dumps(txn.to_dict()))) == txn


def test_bytes_keys_survive_the_round_trip_as_bytes():
    txn = transaction_from_dict(json.loads(json.dumps(EXAMPLES["initialise_partitions"].to_dict())))
    assert isinstance(txn, InitialisePartitions)
    assert txn.partitions[1].region.ranges[0].max == b"\x00\xff"


@pytest.mark.parametrize("raw", [{"type": "rename_everything"}, {}])
def test_unknown_transaction_type_is_refused(raw):
    with pytest.raises(TransactionError, match="unknown transaction type"):
        transaction_from_dict(raw)


def test_references_with_a_delete_horizon_round_trip_and_without_one_keep_their_old_form():
    ref = FileReference("f", "p", 3, delete_horizon=4)
    assert FileReference.from_dict(json.loads(json.dumps(ref.to_dict()))) == ref
    assert "delete_horizon" not in FileReference("f", "p", 3).to_dict()


def test_transactions_are_frozen():
    with pytest.raises(AttributeError):
        EXAMPLES["delete_files"].filenames = ("x",)  # type: ignore[misc]
