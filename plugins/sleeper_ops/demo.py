"""The demo's data: Sleeper's system-test schema and uniformly random rows of it.

Used by ``sleeper demo`` (:mod:`sleeper_ops.cli.demo`), the standalone Airflow's demo
table and the benchmarks, so they all measure the same data.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SYSTEM_TEST_SCHEMA = {
    "rowKeyFields": [{"name": "key", "type": "StringType"}],
    "sortKeyFields": [{"name": "timestamp", "type": "LongType"}],
    "valueFields": [{"name": "value1", "type": "StringType"}, {"name": "value2", "type": "StringType"}],
}
KEY_SPACE = 10**9
#: The value of the table property ``CREATED_BY`` that marks a demo table: ``sleeper demo``
#: replaces only a table marked so.
DEMO_MARK = "sleeper demo"


def key_strings(ints: np.ndarray) -> pa.Array:
    """``key-000000042``-style keys, vectorised."""
    digits = pc.utf8_lpad(pc.cast(pa.array(ints), pa.string()), width=9, padding="0")
    return pc.binary_join_element_wise("key-", digits, "")


def generate_rows(n: int, seed: int) -> pa.Table:
    """``n`` rows of the system-test schema with uniformly random keys."""
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, KEY_SPACE, n)
    v = rng.integers(0, 10**12, n)
    return pa.table({
        "key": key_strings(ints),
        "timestamp": pa.array(rng.integers(0, 2**40, n), pa.int64()),
        "value1": pc.binary_join_element_wise("value1-", pc.cast(pa.array(v), pa.string()), ""),
        "value2": pc.binary_join_element_wise("value2-", pc.cast(pa.array(v * 7 % 10**12), pa.string()), ""),
    })


def split_points(count: int) -> list[str]:
    step = KEY_SPACE // (count + 1)
    return [f"key-{i * step:09d}" for i in range(1, count + 1)]
