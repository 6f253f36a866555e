"""Exclusive leases: one holder at a time per name, for a bounded time.

A lease (e.g. ``"<table_id>/compaction"``) is taken by a holder (any unique string)
for ``ttl_seconds``. While it is unexpired no other holder can take it; the holder
may renew or release it. A crashed holder's lease lapses once its time runs out,
so nothing stays locked forever.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str
    expires_ms: int
