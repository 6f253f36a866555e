"""DataFusion and ``pyarrow.dataset``, imported without importing pandas.

Each builds a literal at import, and pyarrow's scalar and array functions ask pyarrow's
pandas shim whether their input is a pandas object; the first such question imports
pandas (about 0.25 s on this project's 2-core machine) in every process that imports
them, for a library none of our code uses (:mod:`sleeper_ops.io.arrow_numpy` avoids it
for the same reason):

* ``datafusion`` (``datafusion.functions.spark``: ``Expr.literal(pa.scalar(0,
  type=pa.int32()))``), whose conversion of that scalar calls ``pyarrow.array([scalar],
  type)`` from its Rust code: ``sleeper compact``, ``sleeper sql``, each Spark Python
  worker. The import took 0.28-0.32 s, 0.054 s without pandas.
* ``pyarrow.dataset`` (its ``pyarrow._dataset`` builds ``Expression._scalar(True)``,
  which calls ``pyarrow.lib.scalar(True)``): ``sleeper sql`` (DataFusion's
  pyarrow-dataset provider). The import took 0.26 s, 0.11 s without pandas.

:func:`load_datafusion` and :func:`load_pyarrow_dataset` import them while those
functions answer exactly those calls without the question, from Arrow buffers: an
integer of an integer type, a bare ``True`` or ``False``, and a list of one Arrow scalar
of its own type. Every other call goes to pyarrow's own function, and each is pyarrow's
own again once the import returns. What they answer equals what pyarrow's functions
would (``test_pandas_free.py``). A later load is Python's cached module. Our modules
import these two only after loading them here. A literal made later (``datafusion.lit``)
still imports pandas on its first conversion.
"""

from __future__ import annotations

import importlib
import sys
import threading
from types import ModuleType
from typing import Any, Callable

import numpy as np
import pyarrow as pa

_lock = threading.RLock()  # re-entrant: one import may load the other in the same thread


def load_datafusion() -> ModuleType:
    """The ``datafusion`` module, imported as the module docstring says if not yet."""
    return _load("datafusion", pa, ("scalar", _scalar_without_pandas), ("array", _array_without_pandas))


def load_pyarrow_dataset() -> ModuleType:
    """The ``pyarrow.dataset`` module, imported as the module docstring says if not yet."""
    return _load("pyarrow.dataset", pa.lib, ("scalar", _scalar_without_pandas))


def _load(name: str, owner: ModuleType, *replaced: tuple[str, Callable[[Any], Any]]) -> ModuleType:
    """Module ``name``, imported (once) while each ``(attribute, wrap)`` of ``owner`` is
    ``wrap(original)``, the originals put back after."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    with _lock:
        if name not in sys.modules:
            originals = {attr: getattr(owner, attr) for attr, _ in replaced}
            for attr, wrap in replaced:
                setattr(owner, attr, wrap(originals[attr]))
            try:
                importlib.import_module(name)
            finally:
                for attr, original in originals.items():
                    setattr(owner, attr, original)
    return sys.modules[name]


def _scalar_without_pandas(original: Callable[..., Any]) -> Callable[..., Any]:
    def scalar(value: Any, type: Any = None, **kwargs: Any) -> Any:
        if not kwargs and type is None and (value is True or value is False):
            return pa.Array.from_buffers(pa.bool_(), 1, [None, pa.py_buffer(b"\x01" if value else b"\x00")])[0]
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
