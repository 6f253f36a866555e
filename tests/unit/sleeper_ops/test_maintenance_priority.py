"""Scheduled maintenance lowers its process to the table's ``sleeper.table.maintenance.nice``
(sleeper_ops.maintenance.priority), every thread of it, and nothing else does.

A lowered priority cannot be raised again without privileges, so every test that lowers
one does it in a child process of its own, never in the pytest worker. The oracle is the
kernel's own record of each thread's nice value: field 19 of ``/proc/self/task/<tid>/stat``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sleeper_ops.api import Sleeper
from sleeper_ops.demo import SYSTEM_TEST_SCHEMA
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.maintenance import priority
from statestore.errors import SleeperError
from statestore.memory import InMemoryStateStore
from statestore.properties import MAINTENANCE_NICE

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="threads' nice values are Linux's")

#: the child's helpers: every thread's nice from the kernel, a Sleeper in memory, a task's run
PRELUDE = textwrap.dedent('''
    import json, os, sys, threading
    from concurrent.futures import ThreadPoolExecutor
    from sleeper_ops.api import Sleeper
    from sleeper_ops.demo import SYSTEM_TEST_SCHEMA, generate_rows, split_points
    from sleeper_ops.io.storage import ObjectStore
    from statestore.memory import InMemoryStateStore
    from tests.unit.sleeper_ops.operator_runner import execute_task

    def nice_of(tid):
        stat = open(f"/proc/self/task/{tid}/stat").read()
        return int(stat.rsplit(")", 1)[1].split()[16])  # field 19: nice

    def nices():
        out = []
        for tid in os.listdir("/proc/self/task"):
            try:
                out.append(nice_of(tid))
            except FileNotFoundError:  # the thread ended meanwhile
                continue
        return sorted(out)

    sleeper = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(sys.argv[1] + "/data"))
    report = {}
''')


def _child(body: str, tmp_path: Path) -> dict:
    """Run PRELUDE + ``body`` in a new Python process; the ``report`` dict it printed."""
    code = PRELUDE + textwrap.dedent(body) + "\nprint(json.dumps(report))\n"
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_every_thread_running_and_started_later_is_lowered_and_a_lower_one_stays(tmp_path: Path) -> None:
    report = _child('''
        from sleeper_ops.maintenance.priority import yield_cpu_for_maintenance
        import pyarrow as pa, pyarrow.compute as pc
        pc.sum(pa.array(range(1_000_000)))  # pyarrow's CPU pool exists before
        hold = threading.Event()
        pool = ThreadPoolExecutor(3)
        for _ in range(3):
            pool.submit(hold.wait)
        t7 = sleeper.create_table("seven", SYSTEM_TEST_SCHEMA, properties={"sleeper.table.maintenance.nice": "7"})
        t3 = sleeper.create_table("three", SYSTEM_TEST_SCHEMA, properties={"sleeper.table.maintenance.nice": "3"})
        report["before"] = nices()
        report["asked"] = yield_cpu_for_maintenance(t7.info)
        report["after"] = nices()
        later = []

        def own():
            later.append((nice_of(threading.get_native_id()), nices()))
        th = threading.Thread(target=own)
        th.start(); th.join()
        report["started_later"], report["all_then"] = later[0]
        report["asked_lower"] = yield_cpu_for_maintenance(t3.info)
        report["after_lower"] = nices()
        hold.set()
    ''', tmp_path)
    assert len(report["before"]) >= 5 and set(report["before"]) == {0}, report  # main, 3 pool threads, pyarrow's
    assert report["asked"] == 7
    assert report["after"] == [7] * len(report["before"])
    assert report["started_later"] == 7 and set(report["all_then"]) == {7}  # the new thread took its creator's
    assert report["asked_lower"] == 3 and set(report["after_lower"]) == {7}  # only ever lowers


def test_the_maintenance_tasks_lower_their_process_and_ingest_and_the_api_do_not(tmp_path: Path) -> None:
    report = _child('''
        from sleeper_ops.airflow.operators.compaction import SleeperCompactionOperator
        from sleeper_ops.airflow.operators.ingest import SleeperIngestOperator
        from sleeper_ops.airflow.operators.maintenance import SleeperGcOperator, SleeperSplitOperator
        import pyarrow.parquet as pq
        t = sleeper.create_table("events", SYSTEM_TEST_SCHEMA, split_points=split_points(3),
                                 properties={"sleeper.table.maintenance.nice": "5"})
        files = []
        for i in range(2):
            p = f"{sys.argv[1]}/in-{i}.parquet"
            pq.write_table(generate_rows(5_000, seed=i), p)
            files.append(p)
        t.ingest([files[0]]); t.ingest([files[1]])
        t.compact(runner="local"); t.split(); t.gc()
        report["api"] = nices()
        execute_task(SleeperIngestOperator(task_id="ingest", table="events", files=[files[0]]), sleeper)
        report["ingest_task"] = nices()
        execute_task(SleeperGcOperator(task_id="gc", table="events"), sleeper)
        report["gc_task"] = nices()
        execute_task(SleeperIngestOperator(task_id="ingest", table="events", files=[files[1]]), sleeper,
                     run_id="manual__2")
        report["summary"] = execute_task(SleeperCompactionOperator(task_id="compact", table="events", runner="local"),
                                         sleeper)
        report["after_compaction"] = nices()
        report["rows"] = t.query(ranges=[("", None)]).num_rows
    ''', tmp_path)
    assert set(report["api"]) == {0} and set(report["ingest_task"]) == {0}, report  # the caller's priority
    assert set(report["gc_task"]) == {5}, report
    assert set(report["after_compaction"]) == {5} and len(report["after_compaction"]) > 1, report
    assert "committed" in report["summary"], report
    assert report["rows"] == 20_000  # 2 files ingested twice each: nothing lost or doubled by the compactions


def test_a_split_task_lowers_its_process(tmp_path: Path) -> None:
    report = _child('''
        from sleeper_ops.airflow.operators.maintenance import SleeperSplitOperator
        sleeper.create_table("events", SYSTEM_TEST_SCHEMA, properties={"sleeper.table.maintenance.nice": "19"})
        execute_task(SleeperSplitOperator(task_id="split", table="events"), sleeper)
        report["split_task"] = nices()
    ''', tmp_path)
    assert set(report["split_task"]) == {19}, report


def test_zero_the_default_changes_nothing(tmp_path: Path) -> None:
    report = _child('''
        from sleeper_ops.maintenance.priority import yield_cpu_for_maintenance
        os.setpriority(os.PRIO_PROCESS, 0, 2)  # this thread at nice 2, the others at 0
        t = sleeper.create_table("events", SYSTEM_TEST_SCHEMA)
        report["before"] = nices()
        report["asked"] = yield_cpu_for_maintenance(t.info)
        report["after"] = nices()
    ''', tmp_path)
    assert report["asked"] == 0 and 2 in report["before"] and 0 in report["before"], report
    assert report["after"] == report["before"]


@pytest.mark.parametrize("value", ["20", "-1", "ten", "1.5"])
def test_a_value_outside_0_to_19_is_refused_naming_the_property_and_no_table_is_made(tmp_path: Path,
                                                                                   value: str) -> None:
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    with pytest.raises(SleeperError, match="sleeper.table.maintenance.nice") as e:
        s.create_table("events", SYSTEM_TEST_SCHEMA, properties={MAINTENANCE_NICE: value})
    assert "\n" not in str(e.value)
    assert s.state_store.list_tables() == []


def test_a_refusal_by_the_system_is_logged_naming_the_table_and_the_work_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    t = s.create_table("events", SYSTEM_TEST_SCHEMA, properties={MAINTENANCE_NICE: "10"})
    calls: list[tuple[int, int]] = []

    def refuse(which: int, who: int, value: int) -> None:
        calls.append((who, value))
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(priority.os, "setpriority", refuse)  # nothing of this process is lowered
    with caplog.at_level(logging.WARNING, logger=priority.__name__):
        assert priority.yield_cpu_for_maintenance(t.info) == 10
    assert calls and all(v == 10 for _, v in calls)
    assert any("table events" in r.getMessage() and "sleeper.table.maintenance.nice=10" in r.getMessage()
               for r in caplog.records)
