"""One serialisation mechanism for the state store's records and transactions: a frozen
dataclass is written as a JSON object of its fields, read back by the same field list.

What a record is written as follows from its fields and their types, with a few stated
exceptions kept in the class itself, so the stored formats stay what earlier releases
wrote (pinned byte for byte by tests/unit/statestore/golden/):

* keys in field declaration order; ``CODEC_ORDER`` (a class variable) lists fields
  to write first, in its order (a transaction writes ``update_time`` first);
* ``CODEC_TAG`` ``(key, value)`` is written first of all (a transaction's
  ``{"type": "add_files"}``) and ignored when reading;
* ``CODEC_UNWRAP`` writes a one-field record as that field's value alone (a region is
  the list of its ranges);
* field metadata: :func:`key` (the JSON name differs from the field's),
  :func:`omitted_at_default` (left out while at its default: the form written before
  the field existed), :func:`as_records` (a tuple of pairs written as objects);
* types: ``str``, ``int``, ``bool``, ``float``, ``None`` as they are; ``tuple[X, ...]``
  as a list; ``Optional[X]``; nested records; ``dict`` and ``list`` fields hold JSON
  values, written as they are; ``Any`` is a key value (bytes as ``{"b64": ...}``,
  :func:`encode_value`).

Reading takes the keys it knows and ignores others, except for a class that sets
``CODEC_STRICT``: its records refuse (``TypeError``) a key they do not know, as file
references, job records and ingest requests always have (a record written by a later
release is refused rather than rewritten without what it held). A key that is missing
takes the field's default (fields added later read from older records) and is an error
for a field without one. Each class's encoder and decoder are generated once, on first use,
as plain functions (a dict literal; a constructor call), so they cost what hand-written
``to_dict``/``from_dict`` pairs did. :func:`row` and :func:`from_row` are the positional
form (a snapshot's reference rows): the fields' values in declaration order.
"""

from __future__ import annotations

import base64
import dataclasses
import threading
import typing
from typing import Any, Callable, Optional, TypeVar, Union

T = TypeVar("T")

_KEY = "codec.key"
_OMIT = "codec.omit_at_default"
_RECORDS = "codec.as_records"


def key(name: str) -> dict[str, Any]:
    """Field metadata: write the field under ``name``."""
    return {_KEY: name}


def omitted_at_default() -> dict[str, Any]:
    """Field metadata: leave the field out while it has its default value."""
    return {_OMIT: True}


def as_records(*names: str) -> dict[str, Any]:
    """Field metadata: a ``tuple[tuple[...], ...]`` written as a list of objects with
    these keys (``(("a", "p"),)`` -> ``[{"filename": "a", "partition_id": "p"}]``)."""
    return {_RECORDS: names}


def encode_value(v: Any) -> Any:
    """Encode a key value for JSON (bytes become ``{"b64": ...}``)."""
    if isinstance(v, bytes):
        return {"b64": base64.b64encode(v).decode("ascii")}
    return v


def decode_value(v: Any) -> Any:
    """Inverse of :func:`encode_value`."""
    if isinstance(v, dict) and "b64" in v:
        return base64.b64decode(v["b64"])
    return v


class Record:
    """Base of the records and transactions the codec writes: ``to_dict`` and
    ``from_dict`` through :func:`encode` and :func:`decode`."""

    __slots__ = ()

    def to_dict(self) -> Any:
        return encode(self)

    @classmethod
    def from_dict(cls: type[T], data: Any) -> T:
        return decode(cls, data)


def encode(obj: Any) -> Any:
    """``obj`` (a dataclass record) as JSON-ready values."""
    return _codec(type(obj))[0](obj)


def decode(cls: type[T], data: Any) -> T:
    """The ``cls`` record that ``data`` (what :func:`encode` wrote) describes."""
    out: T = _codec(cls)[1](data)
    return out


def row(obj: Any) -> list[Any]:
    """``obj``'s field values in declaration order (not converted)."""
    out: list[Any] = _codec(type(obj))[2](obj)
    return out


def from_row(cls: type[T], values: Any) -> T:
    """The ``cls`` record of :func:`row`'s values."""
    return cls(*values)


Converter = Optional[Callable[[Any], Any]]  # None: the value as it is

_Codec = tuple[Callable[[Any], Any], Callable[[Any], Any], Callable[[Any], list[Any]]]
_CODECS: dict[type, _Codec] = {}
_LOCK = threading.RLock()  # compiling a record compiles the records it holds
_PLAIN = (str, int, bool, float, type(None))


def _codec(cls: type) -> _Codec:
    found = _CODECS.get(cls)
    if found is None:
        with _LOCK:
            found = _CODECS.get(cls) or _compile(cls)
            _CODECS[cls] = found
    return found


def _optional(c: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda v: None if v is None else c(v)


def _converters(tp: Any) -> tuple[Converter, Converter, bool]:
    """(encoder, decoder, nullable) of a value of type ``tp``: the converters are None
    for a value written as it is; ``nullable``: None is written as None, the
    converters see only other values."""
    if tp is Any:
        return encode_value, decode_value, False
    if tp in _PLAIN:
        return None, None, False
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:
            raise TypeError(f"the codec cannot write a union of {args}")
        enc, dec, _ = _converters(inner[0])
        return enc, dec, True
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        enc, dec, nullable = _converters(args[0])
        if enc is None or dec is None:
            return list, tuple, False
        e, d = (_optional(enc), _optional(dec)) if nullable else (enc, dec)
        return (lambda v: [e(x) for x in v]), (lambda v: tuple([d(x) for x in v])), False
    if origin in (dict, list):
        return None, None, False  # JSON values, written as they are
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _codec(tp)[0], _codec(tp)[1], False
    raise TypeError(f"the codec cannot write a value of type {tp!r}")


def _records(names: tuple[str, ...]) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    return (lambda v: [dict(zip(names, x)) for x in v]), (lambda v: tuple([tuple(x[n] for n in names) for x in v]))


def _convert(fn: str, expr: str, nullable: bool) -> str:
    """The expression of ``fn`` (a name, or "" for none) applied to ``expr``."""
    if not fn:
        return expr
    return f"(None if (v := {expr}) is None else {fn}(v))" if nullable else f"{fn}({expr})"


def _compile(cls: type) -> _Codec:
    """Generate the encoder, decoder and row of ``cls`` (see the module docstring), as
    source text made of the class's field names (identifiers), never of data."""
    hints = typing.get_type_hints(cls)
    declared = list(dataclasses.fields(cls))
    ns: dict[str, Any] = {"_cls": cls, "_MISSING": dataclasses.MISSING}
    exec("def row(o):\n    return [" + ", ".join(f"o.{f.name}" for f in declared) + "]\n", ns)
    if getattr(cls, "CODEC_UNWRAP", False):
        (only,) = declared
        enc, dec, _ = _converters(hints[only.name])
        ns.update(_e=enc or (lambda v: v), _d=dec or (lambda v: v))
        exec(f"def encode(o):\n    return _e(o.{only.name})\n"
             "def decode(v):\n    return _cls(_d(v))\n", ns)
        return ns["encode"], ns["decode"], ns["row"]
    first = list(getattr(cls, "CODEC_ORDER", ()))
    written = sorted(declared, key=lambda f: first.index(f.name) if f.name in first else len(first))
    items: list[str] = []
    later: list[str] = []
    tag = getattr(cls, "CODEC_TAG", None)
    if tag is not None:
        ns["_tag"] = tag[1]
        items.append(f"{tag[0]!r}: _tag")
    reads: dict[str, str] = {}
    for i, f in enumerate(written):
        k = f.metadata.get(_KEY, f.name)
        if _RECORDS in f.metadata:
            enc, dec = _records(f.metadata[_RECORDS])
            nullable = False
        else:
            enc, dec, nullable = _converters(hints[f.name])
        ns[f"_e{i}"], ns[f"_d{i}"] = enc, dec
        value = _convert(f"_e{i}" if enc else "", f"o.{f.name}", nullable)
        if f.metadata.get(_OMIT):
            ns[f"_default{i}"] = f.default
            later.append(f"    if o.{f.name} != _default{i}:\n        d[{k!r}] = {value}\n")
        elif later:  # after a field that may be left out: in order, one statement each
            later.append(f"    d[{k!r}] = {value}\n")
        else:
            items.append(f"{k!r}: {value}")
        if f.default is not dataclasses.MISSING:
            ns[f"_default{i}"] = f.default
            missing = f"_default{i}"
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"_factory{i}"] = f.default_factory
            missing = f"_factory{i}()"
        else:
            missing = ""
        if not missing:
            reads[f.name] = _convert(f"_d{i}" if dec else "", f"d[{k!r}]", nullable)
        elif dec is None:
            reads[f.name] = f"d.get({k!r}, {missing})" if not missing.endswith("()") else \
                f"(d[{k!r}] if {k!r} in d else {missing})"
        else:
            reads[f.name] = f"({_convert(f'_d{i}', f'd[{k!r}]', nullable)} if {k!r} in d else {missing})"
    check = ""
    if getattr(cls, "CODEC_STRICT", False):
        ns["_known"] = frozenset([f.metadata.get(_KEY, f.name) for f in declared] + ([tag[0]] if tag else []))
        check = ("    if not _known.issuperset(d):\n        raise TypeError(f'a {_cls.__name__} record has fields "
                 "this release does not know: {sorted(set(d) - _known)} (written by a later release?)')\n")
    source = ("def encode(o):\n    d = {" + ", ".join(items) + "}\n" + "".join(later) + "    return d\n"
              "def decode(d):\n" + check + "    return _cls(" + ", ".join(reads[f.name] for f in declared) + ")\n")
    if all(reads[f.name].startswith(("d[", "d.get(")) and f.metadata.get(_KEY, f.name) == f.name for f in declared):
        # every value as it is, under its field's name: the keys are the arguments (the
        # common case, at C speed); a key the class does not know takes the long way
        source = source.replace("def decode(d):", "def decode_keys(d):") + (
            "def decode(d):\n    try:\n        return _cls(**d)\n    except TypeError:\n"
            "        return decode_keys(d)\n")
    exec(source, ns)
    return ns["encode"], ns["decode"], ns["row"]
