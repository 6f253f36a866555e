"""Query timing and a content check shared by ``bench/peers.py`` and its peers' side
(``bench/_peers_child.py``, in the peers' venv): imports only pyarrow and the standard
library, and changes nothing when imported."""

from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

import pyarrow as pa

#: The columns of Sleeper's system-test schema (:mod:`sleeper_ops.demo`) in the order a
#: result is hashed, each with the Arrow type it is compared as.
ROW_COLUMNS = (("key", "string"), ("timestamp", "int64"), ("value1", "string"), ("value2", "string"))


def rows_digest(table: Any) -> str:
    """A hash of a query result's rows as a set: the columns of :data:`ROW_COLUMNS`, cast to
    their types (``string_view``, ``large_string`` and ``string`` hash alike) and sorted on
    every column, so two systems that return the same rows in any order and layout give the
    same digest."""
    t = pa.table({name: table.column(name).cast(getattr(pa, kind)()) for name, kind in ROW_COLUMNS})
    t = t.sort_by([(name, "ascending") for name, _ in ROW_COLUMNS])
    h = hashlib.blake2b(digest_size=16)
    h.update(str(t.num_rows).encode())
    for name, _ in ROW_COLUMNS:
        h.update(repr(t.column(name).to_pylist()).encode())
    return h.hexdigest()


def timed_queries(items: list[Any], warmup: int, run: Callable[[Any], Any]) -> dict[str, list[Any]]:
    """Each of ``items`` answered by ``run(item) -> pa.Table``, timed alone after ``warmup``
    untimed calls: ``ms`` per query, and ``rows`` and ``digest`` (:func:`rows_digest`, taken
    outside the timed part) per query."""
    for x in items[:warmup]:
        run(x)
    out: dict[str, list[Any]] = {"ms": [], "rows": [], "digest": []}
    for x in items:
        t0 = time.perf_counter()
        table = run(x)
        out["ms"].append((time.perf_counter() - t0) * 1000)
        out["rows"].append(table.num_rows)
        out["digest"].append(rows_digest(table))
    return out


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def sql_queries(q: dict[str, Any], warmup: int, run: Callable[[str], Any]) -> dict[str, dict[str, list[Any]]]:
    """The exact-key and range queries of ``q`` (``keys``; ``ranges`` as [min, max)) as the
    SQL ``WHERE`` clauses every system is asked, each answered by ``run(where)`` and timed
    by :func:`timed_queries`."""
    return {"exact": timed_queries(q["keys"], warmup, lambda k: run(f"key = {_quote(k)}")),
            "range": timed_queries(q["ranges"], warmup,
                                   lambda r: run(f"key >= {_quote(r[0])} AND key < {_quote(r[1])}"))}
