"""``sorted_slice``: the rows of a table sorted on a field inside one range, checked
against a plain-Python filter of the same rows (min inclusive, max exclusive, None
unbounded; strings in code point order, bytes unsigned), for long, int, string and byte
keys (in one chunk, two, or a record batch) with duplicates, bounds on, between and outside the values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sleeper_ops.engine.leaves import sorted_slice
from statestore.region import Range

KINDS = {
    "long": (pa.int64(), lambda rnd: rnd.randrange(-50, 50)),
    "int": (pa.int32(), lambda rnd: rnd.randrange(-50, 50)),
    "string": (pa.string(), lambda rnd: "".join(rnd.choice("aZé\u00ff\U0001f600") for _ in range(rnd.randrange(0, 3)))),
    "bytes": (pa.binary(), lambda rnd: bytes(rnd.choice((0, 1, 127, 128, 255)) for _ in range(rnd.randrange(0, 3)))),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("seed", range(5))
def test_the_slice_holds_exactly_the_rows_in_the_range(kind, seed):
    type_, value = KINDS[kind]
    rnd = random.Random(seed)
    keys = sorted(value(rnd) for _ in range(rnd.randrange(0, 60)))
    table = pa.table({"k": pa.array(keys, type_), "row": list(range(len(keys)))})
    for _ in range(40):
        lo = value(rnd)
        hi = None if rnd.random() < 0.2 else value(rnd)
        if hi is not None and hi <= lo:
            continue
        want = [i for i, k in enumerate(keys) if k >= lo and (hi is None or k < hi)]
        assert sorted_slice(table, Range("k", lo, hi)).column("row").to_pylist() == want, (lo, hi)
        batch = table.combine_chunks().to_batches()[0] if keys else None  # a RecordBatch, as a stream reads
        if batch is not None:
            assert sorted_slice(batch, Range("k", lo, hi)).column("row").to_pylist() == want, (lo, hi)
            cut = rnd.randrange(len(keys) + 1)  # a Table of two chunks, as concatenated reads give
            chunked = pa.concat_tables([table.slice(0, cut), table.slice(cut)])
            assert sorted_slice(chunked, Range("k", lo, hi)).column("row").to_pylist() == want, (lo, hi)
