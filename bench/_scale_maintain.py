"""The maintenance that keeps up while ``bench/scale.py`` ingests: what the DAGs' tasks run.

:func:`maintain` runs in a process of its own (as an Airflow worker runs the tasks) and
loops, until told to stop, over one pass of the three maintenance DAGs of the table, in
the order they follow each other on their default schedules (split every 10 minutes,
compaction every 5, GC every 15):

========================  ===========================================================
``sleeper_<t>_split``     ``Table.split(run_id=...)`` under the table's ``split`` lease
                          (the ``split`` task, ``SleeperSplitOperator``)
``sleeper_<t>_compaction`` ``Table.compact(runner="local", run_id=...)`` under the
                          ``compaction`` lease: job creation then the local runner, the
                          library calls of ``create_jobs`` -> ``run_local``
                          (``SleeperCompactionOperator`` runs the same in one task)
``sleeper_<t>_gc``        ``Table.gc(explain=True)`` under the ``gc`` lease (the ``gc`` task)
========================  ===========================================================

Each task first lowers its process to the table's ``sleeper.table.maintenance.nice``
(:func:`~sleeper_ops.maintenance.priority.yield_cpu_for_maintenance`); so does each pass.

No scheduler paces it: a pass starts as soon as the last one ended, and only a pass that
found nothing to do waits (``pause`` seconds) before the next, so maintenance runs as
often as the DAGs could be triggered by the table's ``sleeper://`` asset. Each pass
appends one JSON line to ``log_path``: what it did, how long each task took and the wall
time of every state store commit it made.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable


def timed_commits(store: Any) -> list[float]:
    """Wrap ``store.commit`` (this process's state store) so that each call's wall time in
    seconds is appended to the list returned."""
    seconds: list[float] = []
    commit = store.commit

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return commit(*args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - t0)
    store.commit = timed
    return seconds


def _task(table: Any, operation: str, run: str, work: Callable[[str], Any]) -> tuple[Any, float]:
    """``work(run)`` under the table's ``operation`` lease held as ``run``; its report and seconds."""
    t0 = time.perf_counter()
    with table.exclusive(operation, run):
        report = work(run)
    return report, time.perf_counter() - t0


def maintain(home: str, table_name: str, log_path: str, stop: Any, pause: float) -> None:
    """Maintenance passes on ``table_name`` of the Sleeper at ``home`` until ``stop`` (an
    Event) is set; one JSON line per pass to ``log_path``. A pass that raises ends the
    process with the error (the bench reports it and stops)."""
    import _common  # noqa: F401  (sys.path)

    from sleeper_ops.api import Sleeper
    from sleeper_ops.maintenance.priority import yield_cpu_for_maintenance

    with Sleeper(home) as s, open(log_path, "a") as log:
        commits = timed_commits(s.state_store)
        table = s.table(table_name)
        n = 0
        while not stop.is_set():
            n += 1
            yield_cpu_for_maintenance(table.info)  # as each task does (and threads started since the last pass)
            run = f"scale-maintenance-{n}"
            started = time.time()
            split, t_split = _task(table, "split", run, lambda r: table.split(run_id=r))
            comp, t_comp = _task(table, "compaction", run, lambda r: table.compact(runner="local", run_id=r))
            gc, t_gc = _task(table, "gc", run, lambda _: table.gc(explain=True))
            failed = comp.count("failed")
            entry = {"pass": n, "start": started, "end": time.time(), "split_s": t_split, "compaction_s": t_comp,
                     "gc_s": t_gc, "splits": len(split.splits), "jobs": len(comp.results), "failed": failed,
                     "rows_compacted": comp.rows_read, "gc_deleted": len(gc.deleted), "commits": list(commits),
                     "nice": os.getpriority(os.PRIO_PROCESS, 0)}
            commits.clear()
            log.write(json.dumps(entry) + "\n")
            log.flush()
            if failed:
                raise RuntimeError(f"maintenance pass {n}: {comp.summary()}")
            if not (split.splits or comp.results or gc.deleted):
                stop.wait(pause)
