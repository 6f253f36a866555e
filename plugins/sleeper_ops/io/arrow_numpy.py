"""Arrow arrays to numpy and back, without importing pandas.

pyarrow's own ``Array.to_numpy`` and ``pa.array`` ask its pandas shim whether their
input is a pandas object, and the first question imports pandas: about half a second
of a new process (0.45 s of a 1 s ``sleeper ingest`` of three rows on a 2-core
machine). Every CLI command pays it once; the ingest path, the write buffer's flush and
the lookup path do not, because these functions read and wrap the raw buffers
instead (as :func:`sleeper_ops.io.arrow_schema.key_scalar` builds scalars).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa


def to_numpy(array: Any) -> np.ndarray:
    """The values of a boolean, integer or floating-point Array or ChunkedArray as a
    numpy array, as ``array.to_numpy(zero_copy_only=False)`` gives them, without
    importing pandas (see the module docstring): a view of the buffer for one chunk of
    numbers, a copy otherwise. An array with nulls, or of another type, goes through
    pyarrow's own conversion."""
    if isinstance(array, pa.ChunkedArray):
        if array.num_chunks == 1:
            return to_numpy(array.chunk(0))
        parts = [to_numpy(c) for c in array.chunks]
        return np.concatenate(parts) if parts else _empty_numpy(array.type)
    if array.null_count:
        return array.to_numpy(zero_copy_only=False)
    t, n, offset = array.type, len(array), array.offset
    if pa.types.is_boolean(t):
        if n == 0:
            return np.zeros(0, dtype=bool)
        bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
        return np.unpackbits(bits, count=offset + n, bitorder="little")[offset:].view(bool)
    dtype = _numpy_dtype(t)
    if dtype is None:
        return array.to_numpy(zero_copy_only=False)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=n, offset=offset * dtype.itemsize)


def indices(values: Any) -> pa.Array:
    """Row positions (any integer sequence or numpy array) as the int64 Arrow array
    :func:`take` wants, without importing pandas (see the module docstring)."""
    a = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(a), [None, pa.py_buffer(a)])


def _numpy_dtype(t: pa.DataType) -> Any:
    """numpy's dtype for an Arrow integer or float32/64 type; None for any other."""
    if pa.types.is_signed_integer(t):
        return np.dtype(f"<i{t.bit_width // 8}")
    if pa.types.is_unsigned_integer(t):
        return np.dtype(f"<u{t.bit_width // 8}")
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return np.dtype(f"<f{t.bit_width // 8}")
    return None


def _empty_numpy(t: pa.DataType) -> np.ndarray:
    return np.zeros(0, dtype=bool if pa.types.is_boolean(t) else (_numpy_dtype(t) or object))
