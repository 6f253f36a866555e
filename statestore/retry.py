"""Bounded retry with full-jitter exponential backoff; the sleep is injectable."""

from __future__ import annotations

import random
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
