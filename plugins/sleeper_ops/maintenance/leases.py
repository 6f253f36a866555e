"""One run per table per operation: an exclusive lease, renewed while the work runs.

Airflow's ``max_active_runs`` does not cover backfills, and the CLI and Python API can
start the same operation too, so exclusivity lives in the state store: each maintenance
run holds the lease ``"<table_id>/<operation>"`` (see :func:`lease_name`) for as long as
it works::

    with OperationLease(store, lease_name(info.table_id, "compaction"), holder="cli/1234"):
        table.compact()

Guarantees:

* Entering takes the lease atomically (the state store's ``acquire_lease``) or raises
  :class:`~statestore.errors.LeaseHeldError` naming the current holder, having changed
  nothing. Re-entering with the same holder (an Airflow retry of the same try, a
  restarted process) renews the lease instead of failing. A holder that the caller can
  tell is gone (``holder_gone``: e.g. a CLI process of this host that no longer exists,
  killed or interrupted) is not waited for: its lease is released, conditional on it
  still being that holder's, and taken.
* While inside, a daemon thread renews the lease every ``ttl_seconds / 3``, so a long run
  keeps it and a crashed one (no more renewals) loses it ``ttl_seconds`` after its last
  renewal at the latest.
* Leaving stops the renewals and releases the lease, whether the body succeeded or raised.
  A release that fails (the state store unreachable) never raises over the body's own
  error, nor prints a traceback: the lease then lapses by itself ``ttl_seconds`` after its
  last renewal (and a holder known to be gone is taken over at once, see ``holder_gone``).
  After a body that raised, the failed release is logged at DEBUG only (the body's error
  is what the user reads); after one that succeeded, in one WARNING line.
  With ``release=False`` a body that succeeded leaves the lease held for a full TTL, for a
  later step of the same holder to take over (an Airflow DAG whose tasks share one lease:
  the next task enters with the same holder, the last one releases); it lapses after
  ``ttl_seconds`` if no step comes. A body that raised always releases.
* If a renewal finds the lease taken by someone else (this holder stalled longer than the
  TTL), :attr:`OperationLease.lost` becomes True and a warning is logged. The work is not
  interrupted: every maintenance commit is conditional on the state it read, so a run
  that overlaps another after losing its lease cannot corrupt the table; the lease exists
  to avoid wasted, duplicated work, not to protect correctness.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Optional

from statestore.errors import LeaseHeldError

if TYPE_CHECKING:
    from statestore.leases import Lease
    from statestore.roles import Leases

log = logging.getLogger(__name__)

DEFAULT_TTL_SECONDS = 120.0


def lease_name(table_id: str, operation: str) -> str:
    """The lease guarding ``operation`` (``split``, ``compaction``, ``gc``...) of one table.

    Keyed by table id, not name, so a rename does not open a second lease."""
    return f"{table_id}/{operation}"


class OperationLease:
    """An exclusive, self-renewing lease; a context manager (see the module docstring).

    Args:
        store: the state store holding the lease.
        name: the lease name, normally :func:`lease_name`.
        holder: a string unique to this run, e.g. ``"{dag_id}/{run_id}/{try_number}"``.
        ttl_seconds: how long the lease outlives its last renewal.
        renew_every: seconds between renewals; default ``ttl_seconds / 3``.
        on_lost: called once (from the renewal thread) if the lease is lost.
        release: release on leaving (default); False keeps it for a later step (see the
            module docstring).
        holder_gone: says whether a holder is known to be gone for good (its lease is then
            taken over rather than waited for); None: every holder is waited for.
    """

    def __init__(self, store: Leases, name: str, holder: str, *, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 renew_every: Optional[float] = None, on_lost: Optional[Callable[[OperationLease], None]] = None,
                 release: bool = True, holder_gone: Optional[Callable[[str], bool]] = None):
        if ttl_seconds <= 0:
            raise ValueError(f"ttl_seconds must be positive, got {ttl_seconds}")
        self.store = store
        self.name = name
        self.holder = holder
        self.ttl_seconds = float(ttl_seconds)
        self.renew_every = float(renew_every) if renew_every is not None else self.ttl_seconds / 3
        if not 0 < self.renew_every < self.ttl_seconds:
            raise ValueError(f"renew_every must be between 0 and ttl_seconds ({self.ttl_seconds}), "
                             f"got {self.renew_every}")
        self._on_lost = on_lost
        self._holder_gone = holder_gone
        self.release = release
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lease: Optional[Lease] = None
        self.lost = False
        self.renewals = 0

    # ----- context manager ----------------------------------------------------------------
    def __enter__(self) -> OperationLease:
        lease = self.store.acquire_lease(self.name, self.holder, self.ttl_seconds)
        if lease is None:
            current = self.store.get_lease(self.name)
            if current is not None and self._holder_gone is not None and self._holder_gone(current.holder):
                if self.store.release_lease(self.name, current.holder):
                    log.info("lease %s: its holder %s is gone; taking it over", self.name, current.holder)
                lease = self.store.acquire_lease(self.name, self.holder, self.ttl_seconds)
                current = self.store.get_lease(self.name) if lease is None else current
        if lease is None:
            by = current.holder if current is not None else "another holder (just released)"
            raise LeaseHeldError(f"lease {self.name} held by {by}")
        self.lease = lease
        self._stop.clear()
        self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.name}", daemon=True)
        self._thread.start()
        log.info("took lease %s as %s (ttl %.0fs)", self.name, self.holder, self.ttl_seconds)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if not self.release and exc_type is None and not self.lost:
            try:
                if self.renew():
                    log.info("keeping lease %s for the next step of %s (ttl %.0fs)",
                             self.name, self.holder, self.ttl_seconds)
            except Exception as e:
                _one_line_warning(f"could not renew lease {self.name} at hand-over ({_reason(e)}); it lapses in "
                                  f"at most {self.ttl_seconds:.0f}s")
            return
        try:
            released = self.store.release_lease(self.name, self.holder)
        except Exception as e:  # the lease lapses by itself; do not hide the body's own error
            said = (f"could not release lease {self.name} held by {self.holder} ({_reason(e)}); it lapses "
                    f"within {self.ttl_seconds:.0f}s")
            if exc_type is None:
                _one_line_warning(said)
            else:  # the body's error is what the caller reports
                log.debug("%s", said, exc_info=True)
            return
        if released:
            log.info("released lease %s", self.name)
        elif not self.lost:
            log.warning("lease %s was no longer held by %s at release", self.name, self.holder)

    # ----- renewal ----------------------------------------------------------------------
    def renew(self) -> bool:
        """Renew now; False (and :attr:`lost` set) if another holder has taken the lease."""
        lease = self.store.acquire_lease(self.name, self.holder, self.ttl_seconds)
        if lease is None:
            if not self.lost:
                self.lost = True
                current = self.store.get_lease(self.name)
                log.warning("lost lease %s: now held by %s", self.name,
                            current.holder if current is not None else "nobody")
                if self._on_lost is not None:
                    self._on_lost(self)
            return False
        self.lease = lease
        self.renewals += 1
        return True

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.renew_every):
            try:
                if not self.renew():
                    return
            except Exception as e:  # a transient state store failure: keep trying until the TTL says otherwise
                _one_line_warning(f"could not renew lease {self.name} ({_reason(e)}); retrying")

    def __repr__(self) -> str:
        return f"OperationLease({self.name!r}, holder={self.holder!r}, lost={self.lost})"


def _reason(e: BaseException) -> str:
    """An exception as one line: its message's first line, else its type's name."""
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _one_line_warning(message: str) -> None:
    """``message`` at WARNING on one line; its traceback (the exception being handled) at DEBUG."""
    log.warning("%s", message)
    log.debug("%s", message, exc_info=True)
