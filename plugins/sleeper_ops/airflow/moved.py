"""The module paths of the previous release's flat provider, kept for one release.

The provider was one folder of modules; it is laid out by kind now (``hooks/``,
``operators/``, ``sensors/``, ``triggers/``, ``links/``, ``assets/``), with the DAG
factory, the plugin and the process runners in :mod:`sleeper_ops.orchestration`. Every
path a user could import before still gives the same object, with a DeprecationWarning
naming the new path, until the next release removes it:

- :data:`MOVED_MODULES`: an old module that is gone has a small shim module at its path
  that warns when imported and re-exports the names it had;
- :data:`MOVED_NAMES`: an old module whose path is a package now (``operators``,
  ``triggers``, ``links``, ``assets``) serves its old names from the package's
  ``__getattr__`` (:func:`old_names`), with a warning on each use.

Old paths also live on where Airflow stored them: a trigger row in the metadata database
names its class by path (``sleeper_ops.airflow.readiness.SleeperVisibleTrigger``), which
still imports; a serialized DAG names its timetable by path, which
:mod:`sleeper_ops.airflow.dated_timetable` keeps registered under the old name.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable

_P = "sleeper_ops.airflow"
_O = "sleeper_ops.orchestration"

#: old module -> the module(s) its names live in now (a shim module at each old path)
MOVED_MODULES: dict[str, tuple[str, ...]] = {
    f"{_P}.provider": (f"{_P}.get_provider_info",),
    f"{_P}.hook": (f"{_P}.hooks.sleeper", f"{_P}.hooks.connection"),
    f"{_P}.connection": (f"{_P}.hooks.connection",),
    f"{_P}.operator_base": (f"{_P}.operators.base",),
    f"{_P}.spark_operators": (f"{_P}.operators.bulk_import", f"{_P}.operators.spark_compaction",
                              f"{_P}.operators.spark_deferral"),
    f"{_P}.spark_compaction_operator": (f"{_P}.operators.spark_compaction",),
    f"{_P}.export_operator": (f"{_P}.operators.export",),
    f"{_P}.emr_operator": (f"{_P}.operators.emr",),
    f"{_P}.readiness": (f"{_P}.sensors.visible", f"{_P}.triggers.visible"),
    f"{_P}.import_wait": (f"{_P}.sensors.import_input", f"{_P}.triggers.import_input"),
    f"{_P}.spark_triggers": (f"{_P}.triggers.spark_service",),
    f"{_P}.asset_uris": (f"{_P}.assets.sleeper",),
    f"{_P}.dag_factory": (f"{_O}.dag_factory",),
    f"{_P}.plugin": (f"{_O}.plugin",),
    f"{_P}.warm_imports": (f"{_O}.warm_imports",),
}

_OPS = f"{_P}.operators"
#: old module that is a package now -> {old name: the module that defines it}
MOVED_NAMES: dict[str, dict[str, str]] = {
    _OPS: {
        "SleeperOperator": f"{_OPS}.base", "task_request_id": f"{_OPS}.base",
        "SleeperIngestOperator": f"{_OPS}.ingest", "SleeperIngestBatcherOperator": f"{_OPS}.ingest",
        "SleeperSplitOperator": f"{_OPS}.maintenance", "SleeperGcOperator": f"{_OPS}.maintenance",
        "SleeperFlushOperator": f"{_OPS}.maintenance",
        "SleeperCompactionOperator": f"{_OPS}.compaction",
        "SleeperCreateCompactionJobsOperator": f"{_OPS}.compaction",
        "SleeperRunCompactionJobsOperator": f"{_OPS}.compaction",
        "SleeperCompactionReportOperator": f"{_OPS}.compaction",
        "SleeperSparkCompactionOperator": f"{_OPS}.spark_compaction",
        "SleeperBulkImportOperator": f"{_OPS}.bulk_import",
        "JOBS_FROM_CREATE_JOBS": f"{_OPS}.spark_deferral",
        "table_asset": f"{_P}.assets.sleeper", "commits_alias": f"{_P}.assets.sleeper",
    },
    f"{_P}.triggers": dict.fromkeys(("BufferThresholdTrigger", "buffer_asset", "POLL_SECONDS"),
                                    f"{_P}.triggers.buffer"),
    f"{_P}.links": dict.fromkeys(("SleeperTableLink", "table_page_url", "STATUS_PREFIX"), f"{_P}.links.sleeper"),
    f"{_P}.assets": {
        **dict.fromkeys(("table_asset", "commits_alias"), f"{_P}.assets.sleeper"),
        **dict.fromkeys(("with_commit_outlets", "key_range_of", "key_range_of_partitions", "commit_extra",
                         "emit_commit_event"), f"{_P}.assets.commits"),
        **dict.fromkeys(("TaskStats", "stat"), f"{_P}.utils.stats"),
    },
}


def warn_moved(old: str) -> None:
    """Warn that the shim module ``old`` (a key of :data:`MOVED_MODULES`) was imported."""
    new = " or ".join(MOVED_MODULES[old])
    warnings.warn(f"{old} is deprecated and is removed in the next release: import from {new}",
                  DeprecationWarning, stacklevel=3)


def old_names(package: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` (a key of :data:`MOVED_NAMES`): an old
    name gives the object from its module now, with a DeprecationWarning naming that
    module; any other name is an AttributeError."""
    names = MOVED_NAMES[package]

    def __getattr__(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        warnings.warn(f"{package}.{name} is deprecated and is removed in the next release: import it from {module}",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), name)

    return __getattr__
