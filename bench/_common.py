"""Shared set-up for benchmarks: a Sleeper over a throwaway state store and local disk."""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Iterator

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
            if state_store != "memory":
                stop_embedded(Path(d))


@contextlib.contextmanager
def stopping_embedded(home: Path) -> Iterator[None]:
    """On leaving, :func:`stop_embedded` of ``home`` (put it before the Sleeper in a ``with``)."""
    try:
        yield
    finally:
        stop_embedded(home)


def stop_embedded(home: Path) -> None:
    """Stop the embedded PostgreSQL of the temporary ``home``. It outlives the bench's
    process (as it outlives a user's command, ``[state_store] idle_minutes``), so without
    this it would keep running, and writing, in a directory being removed."""
    from sleeper_ops.config import SleeperConfig
    from statestore.postgres.idle_stop import stop_server

    stop_server(SleeperConfig.load(home).embedded_pg_dir)


def percentiles(samples: list[float]) -> dict[str, float]:
    xs = sorted(samples)

    def at(q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))]
    return {"p50": at(0.50), "p95": at(0.95), "p99": at(0.99)}


def spread(xs: list[float]) -> str:
    """The median of ``xs`` and their range: ``1.23 (1.01–1.50)``."""
    return f"{statistics.median(xs):,.2f} ({min(xs):,.2f}–{max(xs):,.2f})"


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

