"""Bounded retry with full-jitter exponential backoff; the sleep is injectable."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Backoff:
    """Delays for attempt 1, 2, ...: uniform in [0, min(cap, base * 2**attempt)]."""

    max_attempts: int = 30
    base_seconds: float = 0.002
    cap_seconds: float = 0.5
    sleep: Callable[[float], None] = time.sleep
    rng: random.Random = field(default_factory=random.Random)

    def pause(self, attempt: int) -> None:
        self.sleep(self.rng.uniform(0, min(self.cap_seconds, self.base_seconds * (2 ** attempt))))


class RetryCounter:
    """Commit retries per table since this process started (thread-safe): every backend
    adds one each time a commit of a table is tried again (a conflict, a serialization
    failure, a lost reply). Process-local by design: a metric scraped from each process."""

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def add(self, table_id: str, n: int = 1) -> None:
        with self._lock:
            self._counts[table_id] = self._counts.get(table_id, 0) + n

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def get(self, table_id: str) -> int:
        with self._lock:
            return self._counts.get(table_id, 0)


#: The commit retries of this process (see :meth:`statestore.store.StateStore.commit_retries`).
COMMIT_RETRIES = RetryCounter()
