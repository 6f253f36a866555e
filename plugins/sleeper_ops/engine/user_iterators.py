"""User iterators (``sleeper.table.iterator.python``), from the allowed modules only.

A table's Python iterator is a ``module.path:function`` that every worker reading or
compacting the table imports. Any table writer can set a table property, so the
deployment decides which modules may be named: ``iterators.python_modules`` in
``sleeper.toml`` (:class:`~sleeper_ops.config.SleeperConfig`), a list of module names,
each allowing itself and its submodules (``acme.iterators`` allows
``acme.iterators.clean`` but not ``acme.iteratorsx`` nor ``acme``). Empty, the default:
no module is allowed (age-off and aggregation, the built-in iterators, need none).

Guarantees: a callable outside the list is refused before its module is imported, in
one line naming the property, the module and the setting (:class:`ConfigError`), both
when the property is set and when a chain is built for a read or a compaction, so a
table holding one (set before the list existed, or a list since narrowed) fails its
own reads and compactions, never another table's, and never imports the module.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import pyarrow as pa

from sleeper_ops.errors import ConfigError, IteratorError
from statestore.properties import ITERATOR_PYTHON

BatchFn = Callable[[pa.RecordBatch], Optional[pa.RecordBatch]]

#: the deployment setting (``sleeper.toml``) listing the modules Python iterators may come from
PYTHON_MODULES_SETTING = "iterators.python_modules"
_MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


def python_modules_setting(value: Any) -> tuple[str, ...]:
    """``iterators.python_modules`` as configured (absent: none), checked: a list of
    dotted module names. Raises ConfigError naming the setting."""
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(m, str) and _MODULE_RE.match(m) for m in value):
        raise ConfigError(f"{PYTHON_MODULES_SETTING} must be a list of module names (e.g. [\"acme.iterators\"]), "
                          f"got {value!r}")
    return tuple(value)


def module_allowed(module: str, allowed: Sequence[str]) -> bool:
    """Whether ``module`` is one of ``allowed`` or a submodule of one."""
    return any(module == m or module.startswith(m + ".") for m in allowed)


def refusal(path: str, module: str, allowed: Sequence[str]) -> str:
    """Why ``path`` may not be a Python iterator: its module is outside ``allowed``."""
    listed = ", ".join(allowed) if allowed else "none: no Python iterator is allowed"
    return (f"{ITERATOR_PYTHON}={path!r}: module {module!r} is not allowed for Python iterators "
            f"({PYTHON_MODULES_SETTING} in sleeper.toml lists {listed}); add it there, or use another iterator")


@dataclass(frozen=True)
class UserIterator:
    """A user callable on record batches, checked to return the table's schema."""

    name: str
    fn: BatchFn

    @classmethod
    def load(cls, path: str, allowed: Sequence[str]) -> UserIterator:
        """Import ``module.path:function`` if its module is in ``allowed`` (checked before
        anything is imported); any failure is a ConfigError naming the property."""
        module_name, sep, attr = path.partition(":")
        if not sep or not module_name or not attr:
            raise ConfigError(f"{ITERATOR_PYTHON}={path!r}: expected module.path:function")
        if not module_allowed(module_name, allowed):
            raise ConfigError(refusal(path, module_name, allowed))
        try:
            module = importlib.import_module(module_name)
        except Exception as e:
            raise ConfigError(f"{ITERATOR_PYTHON}={path!r}: cannot import module {module_name!r}: {e!r}") from e
        fn = getattr(module, attr, None)
        if fn is None:
            raise ConfigError(f"{ITERATOR_PYTHON}={path!r}: module {module_name!r} has no attribute {attr!r}")
        if not callable(fn):
            raise ConfigError(f"{ITERATOR_PYTHON}={path!r}: {attr!r} is not callable")
        return cls(path, fn)

    @classmethod
    def wrap(cls, fn: BatchFn) -> UserIterator:
        module = getattr(fn, "__module__", None) or "?"
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
        return cls(f"{module}:{name}", fn)

    def apply(self, batch: pa.RecordBatch, target: pa.Schema, key_names: Sequence[str]) -> Optional[pa.RecordBatch]:
        try:
            out = self.fn(batch)
        except Exception as e:
            raise IteratorError(f"user iterator {self.name} failed: {e!r}") from e
        if out is None:
            return None
        if isinstance(out, pa.Table):  # tolerated: one batch of the same rows
            if not out.num_rows:
                return None
            out = out.combine_chunks().to_batches()[0]
        if not isinstance(out, pa.RecordBatch):
            raise IteratorError(f"user iterator {self.name} returned {type(out).__name__}; "
                                "expected a pyarrow.RecordBatch or None")
        if not out.schema.equals(target):
            if out.schema.names != target.names or out.schema.types != target.types:
                raise IteratorError(f"user iterator {self.name} returned schema\n{out.schema}\n"
                                    f"but the table's Arrow schema is\n{target}")
            out = out.cast(target)  # only nullability or metadata differ
        for name in key_names:
            if out.column(name).null_count:
                raise IteratorError(f"user iterator {self.name} returned nulls in key field {name!r}")
        return out
