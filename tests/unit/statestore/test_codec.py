"""The serialisation mechanism itself (statestore/codec.py), on small records of its own:
what each declaration writes, and how reading treats unknown and missing keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import pytest

from statestore import codec
from statestore.codec import Record, as_records, decode, encode, key, omitted_at_default


@dataclass(frozen=True)
class Inner(Record):
    name: str
    value: Any = None


@dataclass(frozen=True)
class Outer(Record):
    CODEC_ORDER: ClassVar[tuple[str, ...]] = ("stamp",)
    CODEC_TAG: ClassVar[tuple[str, str]] = ("type", "outer")
    items: tuple[Inner, ...]
    parent_id: Optional[str] = field(default=None, metadata=key("parent"))
    horizon: int = field(default=0, metadata=omitted_at_default())
    pairs: tuple[tuple[str, str], ...] = field(default=(), metadata=as_records("file", "partition"))
    best: Optional[Inner] = None
    stamp: int = 0


@dataclass(frozen=True)
class Wrapped(Record):
    CODEC_UNWRAP: ClassVar[bool] = True
    inners: tuple[Inner, ...]


def test_fields_are_written_in_order_with_the_declared_exceptions() -> None:
    o = Outer((Inner("a", b"\x00"), Inner("b", 3)), "p", 0, (("f", "q"),), Inner("c"), 7)
    assert list(encode(o).items()) == [
        ("type", "outer"), ("stamp", 7), ("items", [{"name": "a", "value": {"b64": "AA=="}},
                                                    {"name": "b", "value": 3}]),
        ("parent", "p"), ("pairs", [{"file": "f", "partition": "q"}]), ("best", {"name": "c", "value": None})]
    assert list(encode(Outer((), horizon=2)).items()) == [
        ("type", "outer"), ("stamp", 0), ("items", []), ("parent", None), ("horizon", 2), ("pairs", []),
        ("best", None)]  # in its place when written
    assert decode(Outer, encode(o)) == o == Outer.from_dict(o.to_dict())


def test_a_one_field_record_can_be_written_as_its_field() -> None:
    w = Wrapped((Inner("a"),))
    assert encode(w) == [{"name": "a", "value": None}]
    assert decode(Wrapped, encode(w)) == w


def test_reading_ignores_unknown_keys_and_gives_missing_ones_their_defaults() -> None:
    assert decode(Inner, {"name": "a", "added_later": 1}) == Inner("a")
    assert decode(Outer, {"type": "outer", "items": []}) == Outer(())
    with pytest.raises(KeyError):
        decode(Outer, {"type": "outer"})


def test_rows_are_the_fields_in_declaration_order() -> None:
    assert codec.row(Inner("a", 2)) == ["a", 2]
    assert codec.from_row(Inner, ["a", 2]) == Inner("a", 2)


@pytest.mark.parametrize("record", [
    "FileReference", "JobRecord", "IngestRequest",
])
def test_records_the_previous_release_read_strictly_refuse_a_key_they_do_not_know(record: str) -> None:
    # file references, job records and ingest requests were read with cls(**d): a record
    # written by a later release, with a field this one does not know, is refused, not
    # rewritten without it
    from statestore.files import FileReference
    from statestore.ingest_requests import IngestRequest
    from statestore.jobs import JobRecord

    example = {"FileReference": FileReference("f", "L", 3),
               "JobRecord": JobRecord("t", "j", "ingest", "committed", outputs=("d",)),
               "IngestRequest": IngestRequest("r", "t", "in.parquet", 10, 1)}[record]
    stored = example.to_dict()
    assert type(example).from_dict(stored) == example
    with pytest.raises(TypeError, match=rf"a {record} record has fields this release does not know: \['later'\]"):
        type(example).from_dict({**stored, "later": 1})
