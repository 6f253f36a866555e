"""Scheduled maintenance yields the CPU: a table's split, compaction and GC tasks lower
their worker process to the table's ``sleeper.table.maintenance.nice`` before they work.

On one machine the cores that run maintenance also answer key lookups and take ingest.
Compaction keeps both cores busy for seconds at a time (DataFusion's merge and parallel
writer), and a lookup that wakes behind it waits for a core: its p99 follows the
maintenance, not its own work. A nice value makes the kernel's scheduler hand a core to a
normal-priority thread (a lookup, an ingest) first, while maintenance keeps every cycle
they leave: it slows only when something else wants the core. RocksDB lowers its
compaction threads the same way (``Env::LowerThreadPoolCPUPriority``). See ADR 0023.

Guarantees:

- **Every thread of the process**, those running and those started later: on Linux a nice
  value belongs to a thread (a new thread takes its creator's), so each thread listed in
  ``/proc/self/task`` is lowered, until a pass finds none left to lower (a thread started
  meanwhile by one not yet lowered is caught by the next pass). The pools made before
  (pyarrow's, DataFusion's runtime, a lease's renewal thread) are lowered with it.
  Elsewhere one ``setpriority`` call sets the process.
- **Only ever lowers**: a process already at a higher nice value keeps it, and 0 (the
  default) changes nothing. Raising a priority again needs privileges, so this is for a
  process that does nothing else afterwards: an Airflow task's own process (Airflow runs
  each task in one). The CLI and the Python API never call it.
- **Never fails the task**: a refusal by the operating system (a thread that ended
  between the listing and the call is skipped; anything else) is logged as a warning
  naming the table and the setting, and the work runs at the priority it had.
"""

from __future__ import annotations

import logging
import os

from statestore.catalog import TableInfo
from statestore.properties import MAINTENANCE_NICE

log = logging.getLogger(__name__)

#: passes over the process's threads at most (a pass lowering none ends it)
_PASSES = 3


def _threads() -> list[int]:
    """The ids of this process's threads (Linux), or ``[0]``: the process itself."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except (FileNotFoundError, NotADirectoryError):
        return [0]


def lower_to(nice: int) -> None:
    """Lower every thread of this process to at least ``nice`` (see the module docstring).
    OSError when the system refuses a change (not a thread ending)."""
    if nice <= 0:
        return
    for _ in range(_PASSES):
        changed = False
        for tid in _threads():
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                    changed = True
            except ProcessLookupError:  # the thread ended meanwhile
                continue
        if not changed:
            break


def yield_cpu_for_maintenance(table: TableInfo) -> int:
    """Lower this process to ``table``'s maintenance nice value (module docstring); the
    value it asked for. A scheduled maintenance task calls it before its work."""
    nice = table.get_int(MAINTENANCE_NICE)
    try:
        lower_to(nice)
    except OSError as e:
        log.warning("table %s: %s=%d not applied (%s); maintenance runs at its worker's priority",
                    table.name, MAINTENANCE_NICE, nice, e)
    else:
        if nice:
            log.info("table %s: maintenance at nice %d (%s)", table.name, nice, MAINTENANCE_NICE)
    return nice
