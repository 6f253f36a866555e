"""The library's own records serialise to JSON in a fixed format, pinned by golden files
byte for byte (key order included): a compaction job (sent to Spark executors, the Spark
service and batch files) and an export's manifest (``_manifest.json``, kept in the
user's destination). A format changes only by adding a new golden file beside the old.
``SLEEPER_UPDATE_GOLDEN=1`` writes missing ones.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from sleeper_ops.compaction.jobs import CompactionJob
from sleeper_ops.io.export_manifest import ExportedFile, ExportManifest
from statestore.deletes import Tombstone
from statestore.region import Range, Region

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("SLEEPER_UPDATE_GOLDEN") == "1"

_REGION = Region((Range("key", "a", "m"),))

EXAMPLES: dict[str, Any] = {
    "compaction_job": CompactionJob("t1", "job-1", "left", ("a.parquet", "b.parquet"), False, 30, False, 2, (0, 1),
                                    (Tombstone(2, (_REGION,), "n > 1", 3, 1_700_000_000_000).to_dict(),)),
    "compaction_job_plain": CompactionJob("t1", "job-2", "right", ("c.parquet",)),
    "export_manifest": ExportManifest("events", "t1", "key-1", 42, 1_700_000_000_000, _REGION.to_dict(), "n > 1",
                                      True, "sum(count)", (ExportedFile("left", "part-00000-left.parquet", 10),
                                                           ExportedFile("right", "part-00001-right.parquet", 5))),
}


def _text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_record_serialises_byte_for_byte_as_its_golden_file(name: str) -> None:
    path = GOLDEN / f"{name}.json"
    produced = EXAMPLES[name].to_dict()
    if UPDATE and not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(_text(produced))
    assert _text(produced) == path.read_text(), f"format of {name} changed; see {path}"


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_golden_record_reads_back_to_an_equal_record(name: str) -> None:
    example = EXAMPLES[name]
    assert type(example).from_dict(json.loads((GOLDEN / f"{name}.json").read_text())) == example


def test_older_forms_read_with_their_defaults() -> None:
    """A compaction job written before deletes existed has no horizons or tombstones; a
    manifest of the first format may lack ``iterators`` and ``format``."""
    assert CompactionJob.from_dict({"table_id": "t", "job_id": "j", "partition_id": "p", "inputs": ["a"],
                                    "whole_files": True, "input_records": 3, "exact_count": True}) \
        == CompactionJob("t", "j", "p", ("a",), True, 3, True)
    manifest = ExportManifest.from_dict({"table": "e", "table_id": "t", "export_key": "k", "transaction": 1,
                                         "made_ms": 2, "region": [], "where": None, "write_buffer": False,
                                         "files": [{"leaf": "l", "key": "k.parquet", "rows": 3}], "rows": 3})
    assert (manifest.iterators, manifest.format, manifest.rows) == ("", 1, 3)
