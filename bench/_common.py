"""Shared set-up for benchmarks: a Sleeper over a throwaway state store and local disk."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
warnings.filterwarnings("ignore")


@contextlib.contextmanager
def bench_sleeper(state_store: str = "postgres") -> Iterator:
    """A Sleeper in a temporary directory; ``postgres`` starts an embedded PostgreSQL."""
    from sleeper_ops.api import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from statestore.memory import InMemoryStateStore

    with tempfile.TemporaryDirectory(prefix="sleeper-bench-") as d:
        if state_store == "memory":
            s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(f"{d}/data"))
        else:
            (Path(d) / "sleeper.toml").write_text('[object_store]\nuri = "data"\n')
            s = Sleeper(home=d)
        try:
            yield s, Path(d)
        finally:
            s.close()


def percentiles(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)

    def at(q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]
    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def parse_args(ap: argparse.ArgumentParser, **smoke: object) -> argparse.Namespace:
    """Parse the command line, with ``--smoke``: the tiny sizes in ``smoke`` (argument
    names as attributes) replace the defaults and whatever was given, so the script runs
    in a few seconds and prints output of its usual shape (tests/test_bench_smoke.py runs
    every script so). The figures of a smoke run mean nothing."""
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, a few seconds: a check that the bench runs (its figures mean nothing)")
    args = ap.parse_args()
    if args.smoke:
        for name, value in smoke.items():
            setattr(args, name, value)
    return args


#: The columns of Sleeper's system-test schema (:mod:`sleeper_ops.demo`) in the order a
#: result is hashed, each with the Arrow type it is compared as.
ROW_COLUMNS = (("key", "string"), ("timestamp", "int64"), ("value1", "string"), ("value2", "string"))


def rows_digest(table: Any) -> str:
    """A hash of a query result's rows as a set: the columns of :data:`ROW_COLUMNS`, cast to
    their types (``string_view``, ``large_string`` and ``string`` hash alike) and sorted on
    every column, so two systems that return the same rows in any order and layout give the
    same digest. Imports only pyarrow: ``bench/_peers_child.py`` calls it in the peers' venv."""
    import hashlib

    import pyarrow as pa

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
