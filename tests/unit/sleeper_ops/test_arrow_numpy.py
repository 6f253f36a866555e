"""The raw-buffer conversions between Arrow and numpy that the ingest path uses (so
that it need not import pandas: ``tests/integration/test_lookup_process.py``) give
what pyarrow's own ``to_numpy`` and ``pa.array`` give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sleeper_ops.io.arrow_numpy import indices, to_numpy

TYPES = {"bool": (pa.bool_(), st.booleans()), "int8": (pa.int8(), st.integers(-128, 127)),
         "int32": (pa.int32(), st.integers(-2**31, 2**31 - 1)), "int64": (pa.int64(), st.integers(-2**63, 2**63 - 1)),
         "uint8": (pa.uint8(), st.integers(0, 255)), "uint64": (pa.uint64(), st.integers(0, 2**64 - 1)),
         "float32": (pa.float32(), st.floats(width=32, allow_nan=False)),
         "float64": (pa.float64(), st.floats(allow_nan=False))}


@st.composite
def arrays(draw: st.DrawFn) -> tuple[pa.DataType, pa.Array | pa.ChunkedArray]:
    """Arrays of one type, sliced at any offset (booleans off a byte boundary) and chunked any way."""
    t, values = TYPES[draw(st.sampled_from(sorted(TYPES)))]
    chunks = []
    for values_of_chunk in draw(st.lists(st.lists(values, max_size=40), max_size=4)):
        whole = pa.array(values_of_chunk, t)
        start = draw(st.integers(0, len(whole)))
        chunks.append(whole.slice(start, draw(st.integers(0, len(whole) - start))))
    if len(chunks) == 1 and draw(st.booleans()):
        return t, chunks[0]
    return t, pa.chunked_array(chunks, t)


@settings(deadline=None, max_examples=300)  # pyarrow's own conversion, the model, imports pandas once
@given(arrays())
def test_to_numpy_equals_pyarrows(case: tuple[pa.DataType, pa.Array | pa.ChunkedArray]) -> None:
    t, array = case
    got = to_numpy(array)
    want = array.to_numpy(zero_copy_only=False) if len(array) else np.zeros(0, dtype=t.to_pandas_dtype())
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()


def test_to_numpy_leaves_arrays_with_nulls_and_other_types_to_pyarrow() -> None:
    with_nulls = pa.array([True, None, False])
    assert to_numpy(with_nulls).tolist() == [True, None, False]
    strings = pa.array(["a", "b"])
    assert to_numpy(strings).tolist() == ["a", "b"]


@pytest.mark.parametrize("values", [[], [3, 0, 2], np.array([5, 1], dtype=np.uint64),
                                    np.arange(10, dtype=np.int32)[::3]])
def test_indices_take_the_rows_pa_array_takes(values: object) -> None:
    table = pa.table({"n": list(range(10)), "s": [f"v{i}" for i in range(10)]})
    got = indices(values)
    assert got.type == pa.int64()
    assert got.to_pylist() == pa.array(values, pa.int64()).to_pylist()
    assert table.take(got).equals(table.take(pa.array(values, pa.int64())))
