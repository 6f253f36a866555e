"""One clock: library code reads the wall clock in milliseconds only through
``statestore.clock.now_ms`` (tests set it with ``use_clock``), never by a helper or an
inline ``time.time() * 1000`` of its own. Durations (``time.monotonic``) are not this clock."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ("plugins", "statestore", "dags", "spark_apps")
CLOCK = ROOT / "statestore" / "clock.py"
#: a "now in ms" of its own: time.time() times 1000 (either order), or a now_ms helper
OWN_CLOCK = re.compile(r"time\.time\(\)\s*\*\s*1000|1000\s*\*\s*time\.time\(\)|^\s*def _?now_ms\(", re.M)


def test_no_wall_clock_in_milliseconds_outside_statestore_clock():
    found = [f"{p.relative_to(ROOT)}:{text[:m.start()].count(chr(10)) + 1}: {m.group(0).strip()}"
             for top in LIBRARY for p in sorted((ROOT / top).rglob("*.py")) if p != CLOCK
             for text in [p.read_text(encoding="utf-8")] for m in OWN_CLOCK.finditer(text)]
    assert not found, "read the time with statestore.clock.now_ms():\n" + "\n".join(found)
