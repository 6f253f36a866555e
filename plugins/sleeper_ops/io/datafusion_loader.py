"""DataFusion, imported without importing pandas.

Importing ``datafusion`` builds one literal (``datafusion.functions.spark``:
``Expr.literal(pa.scalar(0, type=pa.int32()))``). ``pyarrow.scalar``, and DataFusion's
conversion of that scalar (``pyarrow.array([scalar], type)``, called from its Rust
code), each ask pyarrow's pandas shim whether their input is a pandas object, and the
first such question imports pandas: the import took 0.28-0.32 s on this project's
2-core machine, 0.054 s without pandas, in every process that imports DataFusion
(``sleeper compact``, ``sleeper sql``, each Spark Python worker), for a library none of
our code uses (:mod:`sleeper_ops.io.arrow_numpy` avoids it for the same reason).

:func:`load` imports DataFusion while ``pyarrow.scalar`` and ``pyarrow.array`` answer
exactly those two calls without the question, from Arrow buffers: an integer of an
integer type, and a list of one Arrow scalar of its own type. Every other call goes to
pyarrow's own function, and both are pyarrow's own again once the import returns. What
they answer equals what pyarrow's functions would (``test_datafusion_loader.py``). A
later :func:`load` is Python's cached module. Our modules import DataFusion only after
:func:`load`. A literal made later (``datafusion.lit``) still imports pandas on its
first conversion.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType
from typing import Any, Callable

import numpy as np
import pyarrow as pa

_lock = threading.Lock()


def load() -> ModuleType:
    """The ``datafusion`` module, imported as the module docstring says if not yet."""
    module = sys.modules.get("datafusion")
    if module is not None:
        return module
    with _lock:
        if "datafusion" not in sys.modules:
            scalar, array = pa.scalar, pa.array
            pa.scalar, pa.array = _scalar_without_pandas(scalar), _array_without_pandas(array)
            try:
                importlib.import_module("datafusion")
            finally:
                pa.scalar, pa.array = scalar, array
    return sys.modules["datafusion"]


def _scalar_without_pandas(original: Callable[..., Any]) -> Callable[..., Any]:
    def scalar(value: Any, type: Any = None, **kwargs: Any) -> Any:
        if (not kwargs and isinstance(type, pa.DataType) and pa.types.is_integer(type)
                and isinstance(value, int) and not isinstance(value, bool)):
            kind = "u" if pa.types.is_unsigned_integer(type) else "i"
            try:
                data = np.array([value], dtype=np.dtype(f"<{kind}{type.bit_width // 8}"))
            except OverflowError:  # out of the type's range: pyarrow's own error
                return original(value, type, **kwargs)
            return pa.Array.from_buffers(type, 1, [None, pa.py_buffer(data.tobytes())])[0]
        return original(value, type, **kwargs)

    return scalar


def _array_without_pandas(original: Callable[..., Any]) -> Callable[..., Any]:
    def array(obj: Any, type: Any = None, *args: Any, **kwargs: Any) -> Any:
        if (not args and not kwargs and isinstance(obj, list) and len(obj) == 1
                and isinstance(obj[0], pa.Scalar)
                and (type is None or (isinstance(type, pa.DataType) and type == obj[0].type))):
            return pa.repeat(obj[0], 1)
        return original(obj, type, *args, **kwargs)

    return array
