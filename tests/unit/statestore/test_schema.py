"""Schemas in Sleeper's JSON form, and key values checked against key types."""

from __future__ import annotations

import json

import pytest

from statestore import Field, ListType, MapType, Schema, SchemaError
from statestore.schema import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    check_key_value,
    key_from_json,
    key_to_json,
    min_value,
)

FULL = {
    "rowKeyFields": [{"name": "id", "type": "StringType"}, {"name": "shard", "type": "IntType"}],
    "sortKeyFields": [{"name": "ts", "type": "LongType"}, {"name": "raw", "type": "ByteArrayType"}],
    "valueFields": [
        {"name": "count", "type": "LongType"},
        {"name": "tags", "type": {"MapType": {"keyType": "StringType", "valueType": "LongType"}}},
        {"name": "hits", "type": {"ListType": {"elementType": "IntType"}}},
    ],
}


def test_sleeper_schema_json_is_parsed_into_fields_of_each_group():
    s = Schema.from_dict(FULL)
    assert s.row_key_fields == (Field("id", "StringType"), Field("shard", "IntType"))
    assert s.sort_key_fields == (Field("ts", "LongType"), Field("raw", "ByteArrayType"))
    assert s.value_fields == (Field("count", "LongType"), Field("tags", MapType("StringType", "LongType")),
                              Field("hits", ListType("IntType")))


def test_schema_json_round_trips_exactly():
    s = Schema.from_dict(FULL)
    assert s.to_dict() == FULL
    assert Schema.from_json(s.to_json()) == s
    assert json.loads(s.to_json()) == FULL


def test_sort_key_and_value_groups_may_be_left_out():
    s = Schema.from_dict({"rowKeyFields": [{"name": "k", "type": "ByteArrayType"}]})
    assert s.sort_key_fields == () and s.value_fields == ()
    assert s.to_dict() == {"rowKeyFields": [{"name": "k", "type": "ByteArrayType"}], "sortKeyFields": [],
                           "valueFields": []}


def test_name_queries_follow_schema_order():
    s = Schema.from_dict(FULL)
    assert s.row_key_names == ["id", "shard"]
    assert s.sort_key_names == ["ts", "raw"]
    assert s.key_names == ["id", "shard", "ts", "raw"]
    assert s.field_names == ["id", "shard", "ts", "raw", "count", "tags", "hits"]
    assert s.field("tags").type == MapType("StringType", "LongType")
    assert s.row_key_types() == ["StringType", "IntType"]


def test_asking_for_a_missing_field_names_it():
    with pytest.raises(SchemaError, match="'nope'"):
        Schema.from_dict(FULL).field("nope")


@pytest.mark.parametrize("raw, message", [
    ([], "must be a JSON object"),
    ("rowKeyFields", "must be a JSON object"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}], "extra": []}, "unknown entries: extra"),
    ({"rowKeyFields": {"name": "k", "type": "IntType"}}, "rowKeyFields must be a list"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}], "valueFields": "v"}, "valueFields must be a list"),
    ({"rowKeyFields": [{"type": "IntType"}]}, r"rowKeyFields\[0\]: a field needs 'name' and 'type'"),
    ({"rowKeyFields": [{"name": "k"}]}, "needs 'name' and 'type'"),
    ({"rowKeyFields": ["k"]}, "needs 'name' and 'type'"),
    ({"rowKeyFields": [{"name": "k", "type": "FloatType"}]}, "unknown type 'FloatType'"),
    ({"rowKeyFields": [{"name": "k", "type": 3}]}, "unknown type 3"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "m", "type": {"MapType": {"keyType": "MapType", "valueType": "IntType"}}}]},
     "MapType keyType must be one of"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "m", "type": {"MapType": {"keyType": "IntType"}}}]},
     "MapType valueType must be one of"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "l", "type": {"ListType": {"elementType": "DoubleType"}}}]},
     "ListType elementType must be one of"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "l", "type": {"ListType": "IntType"}}]}, "ListType needs an object body"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "s", "type": {"SetType": {"elementType": "IntType"}}}]}, "unknown type"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "valueFields": [{"name": "s", "type": {"ListType": {"elementType": "IntType"}, "MapType": {}}}]},
     "unknown type"),
    ({"rowKeyFields": []}, "at least one row key field"),
    ({"sortKeyFields": [{"name": "ts", "type": "LongType"}]}, "at least one row key field"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}], "valueFields": [{"name": "k", "type": "LongType"}]},
     "field name 'k' is used twice"),
    ({"rowKeyFields": [{"name": "", "type": "IntType"}]}, "empty or non-string name"),
    ({"rowKeyFields": [{"name": 7, "type": "IntType"}]}, "empty or non-string name"),
    ({"rowKeyFields": [{"name": "k", "type": {"ListType": {"elementType": "IntType"}}}]},
     "row key field 'k' has type .*key fields must be one of"),
    ({"rowKeyFields": [{"name": "k", "type": "IntType"}],
      "sortKeyFields": [{"name": "m", "type": {"MapType": {"keyType": "IntType", "valueType": "IntType"}}}]},
     "sort key field 'm'"),
])
def test_invalid_schema_is_refused_with_a_message_saying_why(raw, message):
    with pytest.raises(SchemaError, match=message):
        Schema.from_dict(raw)


def test_schema_text_that_is_not_json_is_refused():
    with pytest.raises(SchemaError, match="not valid JSON"):
        Schema.from_json("{rowKeyFields: ")


@pytest.mark.parametrize("key_type, least", [("IntType", INT_MIN), ("LongType", LONG_MIN), ("StringType", ""),
                                             ("ByteArrayType", b"")])
def test_least_value_of_each_key_type(key_type, least):
    assert min_value(key_type) == least


def test_least_value_of_a_value_type_is_refused():
    with pytest.raises(SchemaError, match="not a key type"):
        min_value("MapType")


@pytest.mark.parametrize("key_type, value", [
    ("IntType", INT_MIN), ("IntType", INT_MAX), ("LongType", LONG_MIN), ("LongType", LONG_MAX),
    ("StringType", ""), ("StringType", "é\u0000x"), ("ByteArrayType", b"\x00\xff"),
])
def test_key_values_of_the_right_type_and_range_are_accepted(key_type, value):
    assert check_key_value(key_type, value, "f") == value


def test_bytearray_and_memoryview_become_bytes():
    assert check_key_value("ByteArrayType", bytearray(b"ab"), "f") == b"ab"
    assert check_key_value("ByteArrayType", memoryview(b"ab"), "f") == b"ab"


@pytest.mark.parametrize("key_type, value, message", [
    ("IntType", INT_MAX + 1, "out of range"),
    ("IntType", INT_MIN - 1, "out of range"),
    ("LongType", LONG_MAX + 1, "out of range"),
    ("IntType", True, "got bool"),
    ("LongType", 1.0, "got float"),
    ("LongType", "1", "got str"),
    ("StringType", b"a", "got bytes"),
    ("ByteArrayType", "a", "got str"),
    ("MapType", 1, "not a key type"),
])
def test_key_values_of_the_wrong_type_or_range_are_refused(key_type, value, message):
    with pytest.raises(SchemaError, match=message):
        check_key_value(key_type, value, "f")


def test_key_order_is_python_order_code_points_and_unsigned_bytes():
    # Strings order by code point (= UTF-8 byte order), bytes unsigned lexicographically.
    assert sorted(["b", "a", "é", "Z", "ab"]) == ["Z", "a", "ab", "b", "é"]
    assert sorted([s.encode() for s in ["b", "a", "é", "Z", "ab"]]) == [b"Z", b"a", b"ab", b"b", "é".encode()]
    assert sorted([b"\x80", b"\x7f", b"\x7f\x00"]) == [b"\x7f", b"\x7f\x00", b"\x80"]


def test_bytes_keys_travel_as_base64_in_json():
    assert key_to_json(b"\x00\xff") == "AP8="
    assert key_from_json("ByteArrayType", "AP8=", "f") == b"\x00\xff"
    assert key_to_json(5) == 5 and key_from_json("LongType", 5, "f") == 5


def test_bytes_key_json_that_is_not_base64_is_refused():
    with pytest.raises(SchemaError, match="not valid base64"):
        key_from_json("ByteArrayType", "@@@", "f")
    with pytest.raises(SchemaError, match="base64 string"):
        key_from_json("ByteArrayType", 12, "f")
