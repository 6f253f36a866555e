"""Split points that are not record keys.

A partition boundary lives in the state store for as long as the partition tree does, so
a split point that is a record's key would keep that key after the record is erased
(DESIGN.md section 12). Between two keys ``below < at`` a split may sit at any value
``s`` with ``below < s <= at``: the records below ``s`` are exactly those below ``at``.
:func:`separator` picks the shortest such value for strings and bytes: the shortest
prefix of ``at`` above ``below`` (``"bob@y.org"`` after ``"alice@x.org"`` splits at
``"b"``). It is ``at`` itself only when every shorter prefix of ``at`` is at most
``below`` (``at`` extends ``below``, as ``"abcd"`` extends ``"abc"``), and for int and
long keys, whose neighbours may leave no value between them.
"""

from __future__ import annotations

from typing import Any, Optional


def separator(below: Optional[Any], at: Any) -> Any:
    """The shortest value ``s`` with ``below < s <= at`` (strings and bytes: a prefix of
    ``at``); ``at`` for other types or when ``below`` is None (nothing below)."""
    if isinstance(at, str) and isinstance(below, str) and below < at:
        return next(at[:n] for n in range(1, len(at) + 1) if at[:n] > below)
    if isinstance(at, bytes) and isinstance(below, bytes) and below < at:
        return next(at[:n] for n in range(1, len(at) + 1) if at[:n] > below)
    return at
