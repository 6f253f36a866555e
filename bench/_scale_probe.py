"""The lookups of one ``bench/scale.py`` checkpoint, as a user's client makes them.

Run as a new process (``python bench/_scale_probe.py '<json>'``) on the table's home
while maintenance goes on; prints one JSON line of figures. Every answer is checked by
content against :mod:`_scale_rows`: an exact key returns exactly its record, a range
exactly the rows the counter puts in it; a wrong answer exits 1 saying which.

- **cold**: each of ``cold`` exact-key and ``cold`` range lookups is the first query of a
  process forked from this one before it opened anything (so no metadata copy, no
  cached Parquet footer, a new state store connection): the time of ``Table.query``
  alone, which includes loading the table's metadata. The operating system's page cache
  is not dropped (that would need the whole machine).
- **warm**: ``warm`` exact keys and ``warm`` ranges asked once (untimed) and then again,
  timed, in one process with one ``Sleeper``: the repeated lookup.
- **load**: the wall time of ``Table.state()`` (the whole state read from the store) in
  a process that has read nothing yet, then its median over 3 more.

Before the first fork the modules every lookup process loads outside its timed query are
imported here once (the state store backend's driver, and pandas, which pyarrow loads at
the first ``pa.array`` of NumPy data, in checking an answer): each cold process imported
them afresh, a second or more of a loaded machine's time apiece, and none of it timed.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import statistics
import sys
import time
import traceback
from typing import Any

import _common  # noqa: F401  (sys.path)
import _scale_rows as gen
import numpy as np
from _rows import rows_digest

from sleeper_ops.api import Sleeper


def _exact(table: Any, i: int) -> float:
    key = gen.key_of(i)
    t0 = time.perf_counter()
    got = table.query(keys=[key])
    took = (time.perf_counter() - t0) * 1000
    rows = got.select(["key", "timestamp", "value1", "value2"]).to_pylist()
    if rows != [gen.record(i)]:
        sys.exit(f"exact-key lookup of {key} (row {i:,}) answered {rows[:3]}, expected {gen.record(i)}")
    return took


def _range(table: Any, i: int, n: int) -> float:
    lo = int(gen.key_ints(np.array([i]))[0])
    hi = lo + gen.range_width(n)
    t0 = time.perf_counter()
    got = table.query(ranges=[(gen.key_text(lo), gen.key_text(hi))])
    took = (time.perf_counter() - t0) * 1000
    want = gen.rows_of(gen.counters_in(lo, hi, n))
    if got.num_rows != want.num_rows or rows_digest(got) != rows_digest(want):
        sys.exit(f"range [{gen.key_text(lo)}, {gen.key_text(hi)}) answered {got.num_rows:,} rows, "
                 f"expected {want.num_rows:,} (or other rows)")
    return took


def _cold(home: str, name: str, kind: str, i: int, n: int) -> float:
    """One lookup as the first query of a forked child; its milliseconds."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: open, ask once, report, leave without running the parent's exit code
        code = 1
        try:
            os.close(read)
            with Sleeper(home) as s:
                t = s.table(name)
                ms = _exact(t, i) if kind == "exact" else _range(t, i, n)
            os.write(write, json.dumps(ms).encode())
            code = 0
        except SystemExit as e:  # a wrong answer: say which before leaving
            sys.stderr.write(f"{e}\n")
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not out:
        sys.exit(f"a cold {kind} lookup's process failed (exit code {os.waitstatus_to_exitcode(status)}; "
                 "its error is above)")
    return float(json.loads(out))


def _preload(home: str) -> None:
    """Import what each forked lookup would import outside its timed query (see the module
    docstring); nothing is opened: no connection, no metadata, no file."""
    from sleeper_ops.config import SleeperConfig
    from statestore.backends import BACKENDS

    importlib.import_module(BACKENDS[SleeperConfig.load(home, create=False).state_store_backend][0])
    gen.rows_of(np.zeros(1, np.int64))  # pyarrow's first pa.array of NumPy data imports pandas


def probe(home: str, name: str, n: int, seed: int, cold: int, warm: int) -> dict[str, Any]:
    """The checkpoint's figures (see the module docstring); ``n`` rows are in the table."""
    rng = random.Random(seed)
    out: dict[str, Any] = {}
    _preload(home)
    for kind in ("exact", "range"):
        out[f"cold_{kind}"] = [_cold(home, name, kind, rng.randrange(n), n) for _ in range(cold)]
    with Sleeper(home) as s:
        t = s.table(name)
        t0 = time.perf_counter()
        t.state()
        first = time.perf_counter() - t0
        again = []
        for _ in range(3):
            t0 = time.perf_counter()
            t.state()
            again.append(time.perf_counter() - t0)
        out["load_first_s"], out["load_s"] = first, statistics.median(again)
        keys = [rng.randrange(n) for _ in range(warm)]
        starts = [rng.randrange(n) for _ in range(warm)]
        for i in keys:  # asked once: the first reads of the files' footers happen here
            _exact(t, i)
        for i in starts:
            _range(t, i, n)
        out["warm_exact"] = [_exact(t, i) for i in keys]
        out["warm_range"] = [_range(t, i, n) for i in starts]
    return out


if __name__ == "__main__":
    a = json.loads(sys.argv[1])
    print(json.dumps(probe(a["home"], a["table"], a["rows"], a["seed"], a["cold"], a["warm"])))
