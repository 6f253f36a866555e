"""Event-driven flushing: the flush DAG also runs when a table's write buffer passes
its thresholds.

**Why an asset watcher, not a sensor.** Writes arrive from outside Airflow (the REST
API, the CLI, the Python API), so nothing in Airflow sees them happen, and the core must
not call Airflow to announce them. Two ways let Airflow notice: a deferrable sensor as
the first task of a run, or an event trigger watching an asset. A sensor needs a run to
exist already and waiting in it: the DAG would be always running, its runs hiding the
scheduled ones, and a run started by the cron would wait for the thresholds instead of
flushing. An :class:`~airflow.sdk.AssetWatcher` runs the trigger below in the triggerer
(asyncio, no worker slot, one cheap ``buffer_stats`` read per poll, on the state store
connection the triggers of the process share), and each event it
yields is an asset event for ``sleeper://<table>/buffer``. The flush DAG is scheduled
on its cron *or* that asset (``AssetOrTimeSchedule``), so both start ordinary runs that
take the table's flush lease: a threshold event during a running flush starts a run that
waits its turn (``max_active_runs=1``) and then finds little to do.

The trigger fires when the buffer holds ``flush_records`` records or its oldest record
has waited ``flush_age_seconds`` (:func:`sleeper_ops.ingest.flush.flush_due`), then
stays quiet until a flush has committed (the table's flush count moved) or
``flush_age_seconds`` have passed, so a slow flush is not asked for again and again.
A store it cannot reach is logged at every poll; a table that does not exist (deleted,
its DAG not yet gone) is logged once and looked for every :data:`MISSING_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from sleeper_ops.airflow.triggers import shared_sleeper
from statestore.errors import TableNotFoundError

log = logging.getLogger(__name__)

#: seconds between two reads of the buffer's stats
POLL_SECONDS = 5.0
#: seconds between two looks for a table that does not exist (deleted: Airflow drops the
#: watcher once the table's DAG is gone, which can take a while)
MISSING_POLL_SECONDS = 60.0


class BufferThresholdTrigger(BaseEventTrigger):
    """Yields an event whenever the table's write buffer passes its thresholds (see the
    module docstring). Serialised with its arguments, as every trigger is."""

    def __init__(self, *, table: str, flush_records: int, flush_age_seconds: float,
                 sleeper_conn_id: str = "sleeper_default", poll_seconds: float = POLL_SECONDS) -> None:
        super().__init__()
        self.table, self.sleeper_conn_id = table, sleeper_conn_id
        self.flush_records, self.flush_age_seconds = int(flush_records), float(flush_age_seconds)
        self.poll_seconds = float(poll_seconds)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"table": self.table, "flush_records": self.flush_records,
                 "flush_age_seconds": self.flush_age_seconds, "sleeper_conn_id": self.sleeper_conn_id,
                 "poll_seconds": self.poll_seconds})

    def _stats(self) -> Any:
        """The buffer's stats now (a blocking read: run in a thread), through the Sleeper
        the triggers of this process share per connection
        (:mod:`~sleeper_ops.airflow.triggers.shared_sleeper`). A Sleeper per poll cost a
        new state store connection every few seconds per table (73 ms and 3.3 ms of the
        triggerer's CPU a poll, against 1.9 ms and 0.3 ms)."""
        with shared_sleeper.sleeper_for(self.sleeper_conn_id) as sleeper:
            return sleeper.table(self.table).buffer_stats()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        shared_sleeper.joined(self.sleeper_conn_id)
        try:
            async for event in self._watch():
                yield event
        finally:  # the watcher removed, or the triggerer stopping
            shared_sleeper.left(self.sleeper_conn_id)

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        from sleeper_ops.ingest.flush import flush_due

        fired_at: Optional[float] = None
        fired_flushes: Optional[int] = None
        missing = False  # the table was not found at the last poll
        while True:
            try:
                stats = await asyncio.to_thread(self._stats)
            except TableNotFoundError:  # deleted: said once, then looked for rarely
                if not missing:
                    log.warning("write buffer of table %s: the table does not exist (deleted?); looking for it "
                                "every %.0fs until Airflow drops this watcher with the table's DAG",
                                self.table, max(self.poll_seconds, MISSING_POLL_SECONDS))
                missing = True
                await asyncio.sleep(max(self.poll_seconds, MISSING_POLL_SECONDS))
                continue
            except Exception as e:  # a lost store: keep watching, say why
                log.warning("write buffer of table %s: cannot read its stats: %s", self.table, e)
                await asyncio.sleep(self.poll_seconds)
                continue
            if missing:
                log.info("write buffer of table %s: the table exists again; watching its thresholds", self.table)
                missing = False
            now = time.time()
            quiet = (fired_at is not None and stats.flushes == fired_flushes
                     and now - fired_at < self.flush_age_seconds)
            reason = None if quiet else flush_due(stats, int(now * 1000), flush_records=self.flush_records,
                                                  flush_age_seconds=self.flush_age_seconds)
            if reason is not None:
                fired_at, fired_flushes = now, stats.flushes
                yield TriggerEvent({"table": self.table, "reason": reason, "records": stats.rows})
            await asyncio.sleep(self.poll_seconds)


def buffer_asset(table: str, *, flush_records: int, flush_age_seconds: float,
                 sleeper_conn_id: str = "sleeper_default") -> Any:
    """The asset ``sleeper://<table>/buffer``, watched by a
    :class:`BufferThresholdTrigger`: it gets an event
    whenever the table's write buffer passes its flush thresholds."""
    from airflow.sdk import Asset, AssetWatcher

    trigger = BufferThresholdTrigger(table=table, flush_records=flush_records, flush_age_seconds=flush_age_seconds,
                                     sleeper_conn_id=sleeper_conn_id)
    return Asset(uri=f"sleeper://{table}/buffer", name=f"sleeper://{table}/buffer",
                 watchers=[AssetWatcher(name=f"sleeper_{table}_buffer", trigger=trigger)])
