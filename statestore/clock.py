"""The library's wall clock: now, in milliseconds since the epoch.

Every "now" that is stored or compared with stored times (job records, leases, log items,
history, write buffer entries, GC and expiry ages) reads :func:`now_ms`, so one clock
rules them all. Durations and timeouts measure with ``time.monotonic`` instead, and are
not this clock.

Tests set the time with :func:`use_clock` and a :class:`ManualClock`: the clock is
process-wide (every thread sees it) until the ``with`` block ends. Other processes
(Spark executors, Airflow workers) keep the system clock.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator, Protocol


class Clock(Protocol):
    """A source of the current time."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch (UTC)."""
        ...


class SystemClock:
    """The host's wall clock (``time.time``)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)


class ManualClock:
    """A clock that stands still until moved: :meth:`advance` or :meth:`set`. Safe to read
    and move from several threads."""

    def __init__(self, now_ms: int = 0) -> None:
        self._ms = now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def advance(self, ms: int) -> int:
        """Move the clock ``ms`` milliseconds on; returns the new time."""
        with self._lock:
            self._ms += ms
            return self._ms

    def set(self, ms: int) -> None:
        """Set the time (it may go back: a test of clock skew may want that)."""
        with self._lock:
            self._ms = ms


_clock: Clock = SystemClock()


def now_ms() -> int:
    """Now, in milliseconds since the epoch, from the clock in use."""
    return _clock.now_ms()


@contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Make ``clock`` the clock of every :func:`now_ms` in this process until the block
    ends (then the previous clock again); yields it."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous
