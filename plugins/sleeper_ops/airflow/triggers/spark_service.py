"""Deferrable Spark tasks: the trigger that waits for a job on the standing Spark service.

A deferrable bulk import or Spark compaction task submits its job to the service
(:func:`sleeper_ops.spark.service_client.submit_job`) and defers to
:class:`SparkServiceJobTrigger`, which polls the job in Airflow's triggerer until it ends,
so no worker slot is held meanwhile. The task then resumes and decides the outcome as the
blocking path does (:func:`~sleeper_ops.spark.service_client.bulk_import_outcome`,
:func:`~sleeper_ops.spark.service_client.compaction_outcome`).

Guarantees:

* **The state store decides a lost job, never the trigger.** The trigger fires
  ``ended`` with the service's final status, or ``lost`` when the service restarted
  (it no longer knows the job, or its ``instance`` changed) or stayed unreachable for
  ``lost_after_seconds``. On ``lost`` the task asks the state store: a bulk import is
  committed iff its import key's job record is; a compaction job is as its status
  record says. A commit therefore counts once, and a failed import retried under the
  same key adds its records once.
* **A triggerer that dies loses nothing.** The trigger keeps no state of its own: it is
  re-created from its arguments (service URL, job id, instance) and polls the same job
  again. It carries no credentials (the job's configuration went in the request).
* **A lease held across the wait stays held.** Given ``lease`` (name, holder, TTL),
  the trigger renews it every third of its TTL while it polls, as the task's own
  renewal thread would, so the compaction lease of a deferred run is not taken by
  another run meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator, Optional

from airflow.triggers.base import BaseTrigger, TriggerEvent

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.spark.batch_files import SparkBatchError
from sleeper_ops.spark.service_client import LOST_AFTER_SECONDS, JobLostError, poll_job

log = logging.getLogger(__name__)

#: the longest one poll waits on the service for the job to end
POLL_SECONDS = 10.0


class SparkServiceJobTrigger(BaseTrigger):
    """Fires ``{"status": "ended", "job": <final status>}``, or ``{"status": "lost",
    "reason": ...}``, for job ``job_id`` of the Spark service at ``service`` (see the
    module docstring)."""

    def __init__(self, *, service: str, job_id: str, instance: Optional[str] = None,
                 poll_seconds: float = POLL_SECONDS, lost_after_seconds: float = LOST_AFTER_SECONDS,
                 lease: Optional[dict[str, Any]] = None,
                 sleeper_conn_id: str = SleeperHook.default_conn_name) -> None:
        super().__init__()
        self.service, self.job_id, self.instance = service, job_id, instance
        self.poll_seconds, self.lost_after_seconds = float(poll_seconds), float(lost_after_seconds)
        self.lease, self.sleeper_conn_id = lease, sleeper_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (f"{type(self).__module__}.{type(self).__qualname__}",
                {"service": self.service, "job_id": self.job_id, "instance": self.instance,
                 "poll_seconds": self.poll_seconds, "lost_after_seconds": self.lost_after_seconds,
                 "lease": self.lease, "sleeper_conn_id": self.sleeper_conn_id})

    def _renew_lease(self) -> None:
        assert self.lease is not None
        with SleeperHook(self.sleeper_conn_id).get_conn() as sleeper:
            if sleeper.state_store.acquire_lease(self.lease["name"], self.lease["holder"],
                                                 float(self.lease["ttl_seconds"])) is None:
                log.warning("lease %s is held by another run now; the task will say so", self.lease["name"])

    async def run(self) -> AsyncIterator[TriggerEvent]:
        unreachable_since: Optional[float] = None
        renewed = time.monotonic()
        while True:
            try:
                doc = await asyncio.to_thread(poll_job, self.service, self.job_id, self.instance,
                                              wait=self.poll_seconds)
                unreachable_since = None
                if doc is not None:
                    log.info("job %s on %s ended: %s", self.job_id, self.service, doc.get("state"))
                    yield TriggerEvent({"status": "ended", "job": doc})
                    return
            except SparkBatchError as e:  # JobLostError, or a refused status request: the state store decides
                yield TriggerEvent({"status": "lost", "reason": str(e)})
                return
            except OSError as e:
                now = time.monotonic()
                unreachable_since = unreachable_since or now
                if now - unreachable_since > self.lost_after_seconds:
                    why = f"the Spark service at {self.service} is unreachable ({e}); job {self.job_id} may have run"
                    yield TriggerEvent({"status": "lost", "reason": why})
                    return
                await asyncio.sleep(min(self.poll_seconds, 1.0))
            if self.lease is not None and time.monotonic() - renewed > float(self.lease["ttl_seconds"]) / 3:
                try:
                    await asyncio.to_thread(self._renew_lease)
                    renewed = time.monotonic()
                except Exception as e:  # a transient state store failure: try again next poll
                    log.warning("could not renew lease %s: %s", self.lease["name"], e)


def ended_or_lost(event: Optional[dict[str, Any]]) -> Any:
    """What a resumed task hands to the outcome functions: the job's final status, or a
    :class:`JobLostError` (the state store decides)."""
    if event and event.get("status") == "ended":
        return event["job"]
    return JobLostError((event or {}).get("reason") or "the trigger ended without an event")
