"""When a table's dated bulk import begins: setting ``sleeper.table.bulk.import.source``
without ``sleeper.table.bulk.import.start`` records the time it was set as the start, so
the table's dated DAG first runs the first interval after that, never one already past
(past dates are for backfills)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Mapping, Optional

BULK_IMPORT_SOURCE = "sleeper.table.bulk.import.source"
BULK_IMPORT_START = "sleeper.table.bulk.import.start"


def with_import_start(current: Mapping[str, str], update: Mapping[str, str],
                      now: Optional[datetime] = None) -> dict[str, str]:
    """``update`` plus ``sleeper.table.bulk.import.start`` = ``now`` (UTC, to the minute)
    when it sets the source and neither it nor the table (``current``) names a start."""
    out = dict(update)
    if out.get(BULK_IMPORT_SOURCE) and not out.get(BULK_IMPORT_START) and not current.get(BULK_IMPORT_START):
        out[BULK_IMPORT_START] = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M+00:00")
    return out


def import_start(value: Optional[str]) -> Optional[datetime]:
    """The start property as an aware UTC datetime (a date is its midnight), or None."""
    if not value:
        return None
    start = datetime.fromisoformat(value)
    return start.replace(tzinfo=UTC) if start.tzinfo is None else start.astimezone(UTC)
