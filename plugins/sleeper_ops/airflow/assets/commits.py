"""The events a commit adds to a table's Airflow asset (:func:`~sleeper_ops.airflow.assets.sleeper.table_asset`),
through the alias a committing operator declares.

Every event for ``sleeper://<table>`` carries extras a downstream DAG can wait on
(:class:`~sleeper_ops.airflow.sensors.visible.SleeperVisibleSensor`):

=============  ====================================================================
table          the table's name
transaction    the table's transaction number right after the commit
               (:meth:`statestore.store.StateStore.transaction_number`: only grows)
files, rows    what the commit added
import_key     the bulk import's key (bulk import only)
key_range      ``{"field", "min", "max"}`` on the first row key field: the union of the
               leaf partitions the files went into (``max`` None: unbounded); absent
               when the operation does not report partitions (then: the whole table)
=============  ====================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

from sleeper_ops.airflow.assets.sleeper import commits_alias, table_asset
from sleeper_ops.airflow.utils.stats import stat
from statestore.files import FileReference

if TYPE_CHECKING:
    from sleeper_ops.api import Sleeper


def with_commit_outlets(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the table's commit alias as an outlet (a literal table name only)."""
    table = kwargs.get("table")
    if isinstance(table, str) and "{{" not in table and "outlets" not in kwargs:
        kwargs["outlets"] = [commits_alias(table)]
    return kwargs


def key_range_of(sleeper: Sleeper, table: str, refs: Sequence[FileReference]) -> Optional[dict[str, Any]]:
    """The union of the regions (first row key field) of the partitions ``refs`` are on,
    from the table's partitions (not its files); None when ``refs`` is empty."""
    return key_range_of_partitions(sleeper, table, [r.partition_id for r in refs])


def key_range_of_partitions(sleeper: Sleeper, table: str, partition_ids: Sequence[str]) -> Optional[dict[str, Any]]:
    """The union of the regions (first row key field) of the partitions ``partition_ids``
    (one read of the table's partitions); None when none is given or none exists."""
    wanted = set(partition_ids)
    if not wanted:
        return None
    t = sleeper.table(table)
    ranges = [p.region.ranges[0] for p in t.sleeper.state_store.overview(t.info.table_id, file_limit=0).partitions
              if p.id in wanted]
    if not ranges:
        return None
    tops = [r.max for r in ranges if r.max is not None]
    hi = None if len(tops) < len(ranges) else max(tops)
    return {"field": ranges[0].field, "min": _plain(min(r.min for r in ranges)), "max": _plain(hi)}


def _plain(value: Any) -> Any:
    """A key value as JSON can carry it (bytes as hex)."""
    return value.hex() if isinstance(value, (bytes, bytearray)) else value


def commit_extra(sleeper: Sleeper, table: str, *, files: int, rows: int, import_key: Optional[str] = None,
                 key_range: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The extras of a commit's asset event (see the module docstring)."""
    t = sleeper.table(table)
    extra: dict[str, Any] = {"table": table, "transaction": t.sleeper.state_store.transaction_number(t.info.table_id),
                             "files": files, "rows": rows}
    if import_key:
        extra["import_key"] = import_key
    if key_range is not None:
        extra["key_range"] = key_range
    return extra


def emit_commit_event(operator: Any, context: Any, table: str, *, files: int, rows: int,
                      extra: Optional[dict[str, Any]] = None) -> None:
    """Count the commit in ``Stats``; add an asset event for ``sleeper://<table>`` with
    ``extra`` (default: just ``files`` and ``rows``) if files were committed and
    ``operator`` declares the table's commit alias."""
    stat(operator, table, "rows", rows)
    stat(operator, table, "files", files)
    alias = commits_alias(table)
    if not files or alias not in (operator.outlets or []):
        return
    context["outlet_events"][alias].add(table_asset(table), extra=extra or {"files": files, "rows": rows})
