"""Table schemas in Sleeper's JSON form.

A schema has row key fields (at least one), sort key fields and value fields. Key
fields take ``IntType``, ``LongType``, ``StringType`` or ``ByteArrayType``; value
fields may also be ``MapType`` or ``ListType`` of primitive types. The JSON form is
Sleeper's own, so users can bring their schema files::

    {"rowKeyFields": [{"name": "key", "type": "StringType"}],
     "sortKeyFields": [{"name": "ts", "type": "LongType"}],
     "valueFields": [{"name": "tags", "type": {"MapType": {"keyType": "StringType",
                                                          "valueType": "LongType"}}}]}

Key order: ints and longs numerically, strings by Unicode code point (equal to the
order of their UTF-8 bytes), bytes unsigned lexicographically; several key fields
compare in turn. Python's own comparison of ``int``, ``str`` and ``bytes`` is exactly
this order, so keys are plain Python values and composite keys are tuples.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Union

from statestore.errors import SchemaError

PRIMITIVE_TYPES = ("IntType", "LongType", "StringType", "ByteArrayType")
KEY_TYPES = PRIMITIVE_TYPES

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True)
class MapType:
    """A map of primitive keys to primitive values."""

    key_type: str
    value_type: str


@dataclass(frozen=True)
class ListType:
    """A list of primitive elements."""

    element_type: str


FieldType = Union[str, MapType, ListType]


def type_name(t: FieldType) -> str:
    """A field type as users write it in messages: ``LongType``, ``MapType(K, V)``, ``ListType(E)``."""
    if isinstance(t, MapType):
        return f"MapType({t.key_type}, {t.value_type})"
    if isinstance(t, ListType):
        return f"ListType({t.element_type})"
    return str(t)


@dataclass(frozen=True)
class Field:
    """One named, typed field. ``type`` is a primitive type name, MapType or ListType."""

    name: str
    type: FieldType

    def to_json(self) -> dict[str, Any]:
        if isinstance(self.type, MapType):
            t: Any = {"MapType": {"keyType": self.type.key_type, "valueType": self.type.value_type}}
        elif isinstance(self.type, ListType):
            t = {"ListType": {"elementType": self.type.element_type}}
        else:
            t = self.type
        return {"name": self.name, "type": t}


def _parse_type(raw: Any, where: str) -> FieldType:
    if isinstance(raw, str):
        if raw not in PRIMITIVE_TYPES:
            raise SchemaError(
                f"{where}: unknown type {raw!r}; expected one of {', '.join(PRIMITIVE_TYPES)}, MapType or ListType")
        return raw
    if isinstance(raw, dict) and len(raw) == 1:
        (kind, body), = raw.items()
        if not isinstance(body, dict):
            raise SchemaError(f"{where}: {kind} needs an object body")
        if kind == "MapType":
            kt, vt = body.get("keyType"), body.get("valueType")
            for label, t in (("keyType", kt), ("valueType", vt)):
                if t not in PRIMITIVE_TYPES:
                    raise SchemaError(
                        f"{where}: MapType {label} must be one of {', '.join(PRIMITIVE_TYPES)}, got {t!r}")
            return MapType(str(kt), str(vt))
        if kind == "ListType":
            et = body.get("elementType")
            if et not in PRIMITIVE_TYPES:
                raise SchemaError(
                    f"{where}: ListType elementType must be one of {', '.join(PRIMITIVE_TYPES)}, got {et!r}")
            return ListType(et)
    raise SchemaError(f"{where}: unknown type {raw!r}")


@dataclass(frozen=True)
class Schema:
    """A validated table schema. Field names are unique across all three groups."""

    row_key_fields: tuple[Field, ...]
    sort_key_fields: tuple[Field, ...] = ()
    value_fields: tuple[Field, ...] = ()

    def __post_init__(self) -> None:
        if not self.row_key_fields:
            raise SchemaError("schema needs at least one row key field")
        seen: set[str] = set()
        groups = (("row key", self.row_key_fields), ("sort key", self.sort_key_fields), ("value", self.value_fields))
        for group, fields in groups:
            for f in fields:
                if not isinstance(f.name, str) or not f.name:
                    raise SchemaError(f"{group} field has an empty or non-string name: {f.name!r}")
                if f.name in seen:
                    raise SchemaError(f"field name {f.name!r} is used twice")
                seen.add(f.name)
                if group != "value" and f.type not in KEY_TYPES:
                    raise SchemaError(
                        f"{group} field {f.name!r} has type {f.type!r}; key fields must be one of "
                        f"{', '.join(KEY_TYPES)}")

    # ----- construction -------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Any) -> Schema:
        if not isinstance(raw, dict):
            raise SchemaError("schema must be a JSON object with rowKeyFields, sortKeyFields and valueFields")
        unknown = set(raw) - {"rowKeyFields", "sortKeyFields", "valueFields"}
        if unknown:
            raise SchemaError(f"schema has unknown entries: {', '.join(sorted(unknown))}")
        groups = []
        for name in ("rowKeyFields", "sortKeyFields", "valueFields"):
            items = raw.get(name, [])
            if not isinstance(items, list):
                raise SchemaError(f"{name} must be a list of fields")
            fields = []
            for i, item in enumerate(items):
                where = f"{name}[{i}]"
                if not isinstance(item, dict) or "name" not in item or "type" not in item:
                    raise SchemaError(f"{where}: a field needs 'name' and 'type'")
                fields.append(Field(item["name"], _parse_type(item["type"], f"{where} ({item['name']})")))
            groups.append(tuple(fields))
        return cls(*groups)

    @classmethod
    def from_json(cls, text: str) -> Schema:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from e
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rowKeyFields": [f.to_json() for f in self.row_key_fields],
            "sortKeyFields": [f.to_json() for f in self.sort_key_fields],
            "valueFields": [f.to_json() for f in self.value_fields],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    # ----- queries ------------------------------------------------------------------
    @property
    def all_fields(self) -> tuple[Field, ...]:
        return self.row_key_fields + self.sort_key_fields + self.value_fields

    @property
    def row_key_names(self) -> list[str]:
        return [f.name for f in self.row_key_fields]

    @property
    def sort_key_names(self) -> list[str]:
        return [f.name for f in self.sort_key_fields]

    @property
    def key_names(self) -> list[str]:
        """Row key then sort key field names: the order files are sorted by."""
        return self.row_key_names + self.sort_key_names

    @property
    def field_names(self) -> list[str]:
        return [f.name for f in self.all_fields]

    def field(self, name: str) -> Field:
        for f in self.all_fields:
            if f.name == name:
                return f
        raise SchemaError(f"schema has no field {name!r}")

    def row_key_types(self) -> list[str]:
        return [f.type for f in self.row_key_fields]  # type: ignore[misc]


def min_value(key_type: str) -> Any:
    """The least value of a key type: the left edge of the root partition."""
    if key_type == "IntType":
        return INT_MIN
    if key_type == "LongType":
        return LONG_MIN
    if key_type == "StringType":
        return ""
    if key_type == "ByteArrayType":
        return b""
    raise SchemaError(f"not a key type: {key_type!r}")


def check_key_value(key_type: str, value: Any, field_name: str) -> Any:
    """Return ``value`` as the Python value of ``key_type``, or raise SchemaError.

    Accepts Python ints for IntType/LongType (range-checked), str for StringType and
    bytes for ByteArrayType. Booleans are refused as ints.
    """
    if key_type in ("IntType", "LongType"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise SchemaError(f"field {field_name!r} is {key_type}; got {type(value).__name__} {value!r}")
        lo, hi = (INT_MIN, INT_MAX) if key_type == "IntType" else (LONG_MIN, LONG_MAX)
        if not lo <= value <= hi:
            raise SchemaError(f"field {field_name!r} is {key_type}; {value} is out of range")
        return value
    if key_type == "StringType":
        if not isinstance(value, str):
            raise SchemaError(f"field {field_name!r} is StringType; got {type(value).__name__} {value!r}")
        return value
    if key_type == "ByteArrayType":
        if isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        if not isinstance(value, bytes):
            raise SchemaError(f"field {field_name!r} is ByteArrayType; got {type(value).__name__} {value!r}")
        return value
    raise SchemaError(f"not a key type: {key_type!r}")


def key_from_json(key_type: str, value: Any, field_name: str) -> Any:
    """Decode one key value from its JSON form (bytes are base64 strings)."""
    if key_type == "ByteArrayType":
        if not isinstance(value, str):
            raise SchemaError(f"field {field_name!r} is ByteArrayType; give it as a base64 string, got {value!r}")
        try:
            value = base64.b64decode(value, validate=True)
        except ValueError as e:
            raise SchemaError(f"field {field_name!r}: {value!r} is not valid base64") from e
    return check_key_value(key_type, value, field_name)


def key_to_json(value: Any) -> Any:
    """Encode one key value in its JSON form (bytes become base64 strings)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value
