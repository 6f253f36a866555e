"""A table's dated bulk import (the DAG ``sleeper_<table>_bulk_import``): when it begins
and when a date's input is there.

* Setting ``sleeper.table.bulk.import.source`` without ``sleeper.table.bulk.import.start``
  records the time it was set as the start, so the table's dated DAG first runs the first
  interval starting at or after that, never one already past (past dates are for
  backfills).
* A date's run first waits for its input (:func:`missing_input`): it may start once the
  date is already imported (its import key committed) or every source names input files;
  otherwise it waits up to ``sleeper.table.bulk.import.wait.hours``
  (:func:`wait_hours`), then fails with one line naming what is missing
  (:func:`no_input_message`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from statestore.properties import BULK_IMPORT_SOURCE, BULK_IMPORT_START, BULK_IMPORT_WAIT_HOURS, PROPERTY_DEFS

if TYPE_CHECKING:
    from sleeper_ops.stores import Stores



def with_import_start(current: Mapping[str, str], update: Mapping[str, str],
                      now: Optional[datetime] = None) -> dict[str, str]:
    """``update`` plus ``sleeper.table.bulk.import.start`` = ``now`` (UTC, to the second)
    when it sets the source and neither it nor the table (``current``) names a start."""
    out = dict(update)
    if out.get(BULK_IMPORT_SOURCE) and not out.get(BULK_IMPORT_START) and not current.get(BULK_IMPORT_START):
        out[BULK_IMPORT_START] = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    return out


def import_start(value: Optional[str]) -> Optional[datetime]:
    """The start property as an aware UTC datetime (a date is its midnight), or None."""
    if not value:
        return None
    start = datetime.fromisoformat(value)
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)


def wait_hours(properties: Mapping[str, str]) -> float:
    """How long a date's run waits for its input (``sleeper.table.bulk.import.wait.hours``)."""
    return float(properties.get(BULK_IMPORT_WAIT_HOURS) or str(PROPERTY_DEFS[BULK_IMPORT_WAIT_HOURS].default))


def missing_input(sleeper: Stores, table: str, sources: Sequence[str],
                  import_key: Optional[str] = None) -> list[str]:
    """What keeps the import of ``sources`` under ``import_key`` from starting now: one
    line per source with no input file (or of an unknown type); empty when every source
    names input files or ``import_key`` is already imported into the table (its input may
    be gone since)."""
    from sleeper_ops.bulk_import.job import already_imported
    from sleeper_ops.bulk_import.sources import find_inputs

    store = sleeper.state_store
    if import_key and already_imported(store, store.get_table(table), import_key, None) is not None:
        return []
    return find_inputs(list(sources), sleeper.s3)[1]


def no_input_message(table: str, interval: str, hours: float, missing: Sequence[str]) -> str:
    """The one line a date's run fails with after waiting ``hours`` for its input."""
    return (f"table {table}: no input for the bulk import of {interval} after waiting {hours:g} h "
            f"({BULK_IMPORT_WAIT_HOURS}): {'; '.join(missing)}")
