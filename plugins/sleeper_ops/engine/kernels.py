"""The few Arrow compute kernels the lookup path runs, called by name without importing
:mod:`pyarrow.compute`.

``import pyarrow.compute`` builds a Python wrapper, with its docstring, for each of
Arrow's ~290 kernels: 40-80 ms of every new process, which a ``sleeper query --key``
(a new process per lookup) cannot afford. Each wrapper only calls ``call_function``
of pyarrow's compiled compute module with the kernel's name; so do these, with the
same semantics (``Table.filter``, ``Table.take`` and ``pc.sort_indices`` import the
wrappers; the functions here do not). Everything off the lookup path keeps using
:mod:`pyarrow.compute` (imported inside the functions that need it).
"""

from __future__ import annotations

from typing import Any, Sequence

try:
    from pyarrow._compute import SortOptions, call_function
except ImportError:  # pragma: no cover - a pyarrow whose compiled module moved: the wrappers' own
    from pyarrow.compute import SortOptions, call_function


def greater_equal(a: Any, b: Any) -> Any:
    """``pc.greater_equal``: elementwise ``a >= b``."""
    return call_function("greater_equal", [a, b])


def less(a: Any, b: Any) -> Any:
    """``pc.less``: elementwise ``a < b``."""
    return call_function("less", [a, b])


def and_(a: Any, b: Any) -> Any:
    """``pc.and_``: elementwise ``a and b`` (null if either is null)."""
    return call_function("and", [a, b])


def or_(a: Any, b: Any) -> Any:
    """``pc.or_``: elementwise ``a or b`` (null if either is null)."""
    return call_function("or", [a, b])


def invert(a: Any) -> Any:
    """``pc.invert``: elementwise ``not a``."""
    return call_function("invert", [a])


def count_true(mask: Any) -> int:
    """``pc.sum(mask)`` as an int: how many of a boolean array's values are true."""
    return call_function("sum", [mask]).as_py() or 0


def filter_rows(data: Any, mask: Any) -> Any:
    """``data.filter(mask)`` for a Table or RecordBatch: the rows where ``mask`` is true
    (null drops the row)."""
    return call_function("filter", [data, mask])


def take(data: Any, indices: Any) -> Any:
    """``data.take(indices)`` for a Table or RecordBatch."""
    return call_function("take", [data, indices])


def sort_indices(data: Any, sort_keys: Sequence[tuple[str, str]]) -> Any:
    """``pc.sort_indices(data, sort_keys=sort_keys)``: the row order by ``sort_keys``
    (``(name, "ascending"|"descending")``), stable."""
    return call_function("sort_indices", [data], SortOptions(sort_keys=list(sort_keys)))


def sorted_by(data: Any, sort_keys: Sequence[tuple[str, str]]) -> Any:
    """``data`` with its rows in the order of ``sort_keys`` (see :func:`sort_indices`)."""
    return take(data, sort_indices(data, sort_keys))
