"""Whether a table's commits meet other committers lately: the choice between a single
commit and group commit (:mod:`statestore.dynamodb.group_commit`).

A store with ``group_commit=True`` commits alone while nobody else commits to the table:
a single commit costs about half a group commit's round trips. Once it meets other
committers it commits through group commit for :data:`CONTENTION_SECONDS`, and every
sign of them since (a single try that lost the race for the next log number, a batch
it led holding other committers' requests, a verdict another leader wrote for it)
starts that time again; so does a single try that finds transactions of others in the
log since its store last read it, and, looked for every :data:`PENDING_CHECK_SECONDS`
while it commits alone, other committers' requests pending. A store alone again goes
back to single commits once the time has passed.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

#: how long a sign of other committers keeps a table's commits on group commit
CONTENTION_SECONDS = 5.0
#: a store making single commits looks for other committers' pending requests this often
PENDING_CHECK_SECONDS = 0.25


class Contention:
    """Per table: the monotonic time until which its commits go through group commit."""

    def __init__(self, seconds: float = CONTENTION_SECONDS, check_seconds: float = PENDING_CHECK_SECONDS) -> None:
        self.seconds = seconds
        self.check_seconds = check_seconds
        self._until: dict[str, float] = {}
        self._checked: dict[str, float] = {}
        self._lock = threading.Lock()

    def grouped(self, table_id: str, others_pending: Callable[[], bool]) -> bool:
        """Whether the next commit to the table goes through group commit: other
        committers seen lately, or, at most every ``check_seconds``, requests of theirs
        pending (``others_pending`` reads them). A single committer never loses a race
        against batches that cannot land while it commits, so it must look: otherwise
        it could starve the others' requests."""
        if self.active(table_id):
            return True
        now = time.monotonic()
        with self._lock:
            if now - self._checked.get(table_id, -self.check_seconds) < self.check_seconds:
                return False
            self._checked[table_id] = now
        if others_pending():
            self.seen(table_id)
            return True
        return False

    def seen(self, table_id: str) -> None:
        """Other committers were seen on the table just now."""
        with self._lock:
            self._until[table_id] = time.monotonic() + self.seconds

    def active(self, table_id: str) -> bool:
        """Whether other committers were seen on the table within the last ``seconds``."""
        with self._lock:
            until = self._until.get(table_id)
            if until is None:
                return False
            if time.monotonic() < until:
                return True
            del self._until[table_id]
            return False
