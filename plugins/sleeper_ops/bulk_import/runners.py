"""Where bulk imports run, by name, imported only when used (like the compaction batch
runners): the core never imports its Spark adapter."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Callable

from sleeper_ops.errors import ConfigError

if TYPE_CHECKING:
    from sleeper_ops.bulk_import.job import BulkImportResult
    from sleeper_ops.config import SleeperConfig

#: runner name -> ``module:function`` taking (config, table, sources, *, import_key, run_id)
BULK_IMPORT_RUNNERS = {"spark": "sleeper_ops.spark.bulk_submit:submit_bulk_import"}
#: a bulk import runner: (config, table, sources, *, import_key, run_id, **options) -> its result
BulkImportRunner = Callable[..., "BulkImportResult"]


def load_bulk_import_runner(name: str = "spark") -> BulkImportRunner:
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


def where_it_runs(config: SleeperConfig) -> str:
    """Where the ``spark`` runner sends a bulk import under ``config``, as a user reads
    it: the standing Spark service when the configuration names one (``[spark]
    service``: no spark-submit), else a spark-submit on ``[spark] master``."""
    if config.spark_service:
        return f"on the Spark service at {config.spark_service}"
    return f"with spark-submit on {config.spark_master}"
