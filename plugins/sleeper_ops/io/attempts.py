"""Attempt-unique object keys: the one naming rule for writers that may run twice at once.

A job names each object it will write in its record before writing it (DESIGN.md
section 10). An engine that may run the same task more than once at the same time --
Spark, with speculation, or a task retried after its executor was lost while the first
attempt still runs -- must not let two attempts write the same key: a losing attempt
would overwrite, or on failure delete, the file the winner wrote and the driver
committed. So each attempt of a task writes the key its job named with the attempt's
own tag inserted before the extension::

    .../5f0c...e1.parquet   named in the job record (the named key)
    .../5f0c...e1.attempt-17.parquet   written by task attempt 17 (an attempt key)

Guarantees:

* :func:`attempt_key` gives distinct keys for distinct tags, and
  :func:`named_key` maps every one of them (and their ``.sketches`` sidecars' data
  files) back to the named key; keys without a tag map to themselves.
* A job record naming ``K`` therefore names every attempt key of ``K``: the orphan
  sweep (:func:`sleeper_ops.maintenance.gc.sweep_orphans`) keeps them while the job is
  in flight, and once the job is final, any that is not tracked is an orphan.
* Only the attempt whose result reached the driver is committed; the others' keys are
  never referenced, so deleting them (:func:`attempt_objects`) never removes a
  committed file.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from sleeper_ops.io.storage import ObjectStore

#: what separates a named key's stem from an attempt's tag
MARK = ".attempt-"
_TAG = re.compile(r"[0-9A-Za-z]+")
_ATTEMPT = re.compile(r"^(?P<stem>.+)\.attempt-[0-9A-Za-z]+(?P<ext>\.[0-9A-Za-z]+)$")


def attempt_key(key: str, tag: str) -> str:
    """The key attempt ``tag`` (letters and digits) writes for the named ``key``."""
    if not _TAG.fullmatch(tag):
        raise ValueError(f"an attempt tag is letters and digits, got {tag!r}")
    stem, ext = os.path.splitext(key)
    return f"{stem}{MARK}{tag}{ext}"


def named_key(key: str) -> str:
    """The key a job names for ``key``: ``key`` without its attempt tag, if any."""
    m = _ATTEMPT.match(key)
    return key if m is None else m["stem"] + m["ext"]


def attempt_objects(objects: ObjectStore, named: Iterable[str]) -> list[str]:
    """Every object written by an attempt of the ``named`` keys: their attempt keys and
    those keys' sidecars (an object whose key, less its tag, has the stem of a named
    key), found with one listing per directory. The named keys themselves are not
    included."""
    stems: dict[str, set[str]] = {}
    for k in named:
        directory = k.rsplit("/", 1)[0] if "/" in k else ""
        stems.setdefault(directory, set()).add(os.path.splitext(k)[0])
    found = []
    for directory, wanted in stems.items():
        for o in objects.list(directory):
            untagged = named_key(o.key)
            if untagged != o.key and os.path.splitext(untagged)[0] in wanted:
                found.append(o.key)
    return sorted(found)
