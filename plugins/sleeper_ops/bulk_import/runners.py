"""Where bulk imports run, by name, imported only when used (like the compaction batch
runners): the core never imports its Spark adapter."""

from __future__ import annotations

import importlib
from typing import Any

from sleeper_ops.errors import ConfigError

#: runner name -> ``module:function`` taking (config, table, sources, *, import_key, run_id)
BULK_IMPORT_RUNNERS = {"spark": "sleeper_ops.spark.bulk_submit:submit_bulk_import"}


def load_bulk_import_runner(name: str = "spark") -> Any:
    """The bulk import runner ``name``. Raises ConfigError for an unknown name or when
    its packages (pyspark) are missing."""
    try:
        module_name, function = BULK_IMPORT_RUNNERS[name].split(":")
    except KeyError:
        raise ConfigError(f"unknown bulk import runner {name!r}; expected one of "
                          f"{', '.join(sorted(BULK_IMPORT_RUNNERS))}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"the {name} bulk import runner cannot be loaded: {e}") from e
    return getattr(module, function)
