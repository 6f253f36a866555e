"""Spark runs a task more than once: a speculative copy of a slow task, and a task
retried after its executor is SIGKILLed (issue 18, finding 3). On a standalone master
and three workers (one core each, on distinct loopback hosts so each takes another's
speculative copies; the third runs the copy and the retry while the first two are
held), with aggressive speculation. Every record stays exactly once and
no committed file is deleted: each attempt writes keys of its own, the driver commits
the winner's, and a loser deletes only its own.

The slow first attempt and the doomed task are a table iterator
(``compaction_helpers/attempt_hook.py``) on the executors' PYTHONPATH. One cluster
serves the module; the data are small so the module takes well under a minute.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
import tomli_w

from sleeper_ops import Sleeper
from sleeper_ops.maintenance.gc import sweep_orphans
from tests.integration.test_spark_compaction import BASIC, SCHEMA, ids, rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HELPERS = Path(__file__).parent / "compaction_helpers"
WAIT = 120.0  # seconds any one step may take before the test gives up


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.spark_cluster import standalone_cluster

    yield from standalone_cluster(tmp_path_factory.mktemp("spark-attempts"), cores=1, memory="1g", workers=3)


def _spark_defaults(conf_dir: Path, hook_dir: Path, events: Path) -> None:
    """A spark-defaults.conf with speculation as eager as Spark allows, the attempt hook
    on, a killed Python worker given time to fail by itself, and an event log to count
    attempts from."""
    conf = {
        "spark.speculation": "true",
        "spark.speculation.interval": "100ms",
        "spark.speculation.multiplier": "1.1",
        "spark.speculation.quantile": "0.1",
        "spark.speculation.minTaskRuntime": "100ms",
        "spark.speculation.task.duration.threshold": "1s",  # single-task stages are speculated too
        "spark.python.task.killTimeout": "120s",
        "spark.executor.memory": "512m",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.executorEnv.PYTHONPATH": str(HELPERS),
        "spark.executorEnv.SLEEPER_TEST_ATTEMPT_DIR": str(hook_dir),
    }
    conf_dir.mkdir()
    events.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))


def _task_events(events: Path) -> list[dict[str, Any]]:
    out = []
    for f in events.rglob("*"):
        if f.is_file():
            for line in f.read_text().splitlines():
                if not line.startswith("{"):
                    continue
                e = json.loads(line)
                if e["Event"] in ("SparkListenerTaskStart", "SparkListenerTaskEnd"):
                    out.append(e)
    return out


def _wait_for(what: str, ok: Any, worker: threading.Thread | None) -> None:
    deadline = time.monotonic() + WAIT
    while not ok():
        assert time.monotonic() < deadline and (worker is None or worker.is_alive()), f"{what} never happened"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_speculative_copy_and_a_killed_executor_leave_every_record_once_and_no_committed_file_deleted(
        tmp_path, pg_dsn, cluster, monkeypatch):
    from tests.spark_cluster import executor_of

    hook_dir, events, conf_dir = tmp_path / "hook", tmp_path / "events", tmp_path / "conf"
    hook_dir.mkdir()
    _spark_defaults(conf_dir, hook_dir, events)
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    monkeypatch.setenv("PYTHONPATH", str(HELPERS))
    monkeypatch.syspath_prepend(str(HELPERS))
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(tomli_w.dumps({
        "object_store": {"uri": "data"}, "state_store": {"backend": "postgres", "dsn": pg_dsn},
        "spark": {"master": cluster}, "iterators": {"python_modules": ["attempt_hook"]}}))
    with Sleeper(home=home) as s:
        t = s.create_table("events", SCHEMA, split_points=[3333, 6666],
                           properties={**BASIC, "sleeper.table.iterator.python": "attempt_hook:hook"})
        for i in range(3):
            t.ingest(rows(2000, seed=i, first_id=i * 100_000))
        before = ids(t)
        reports = []
        worker = threading.Thread(target=lambda: reports.append(t.compact(runner="spark", run_id="attempts")))
        worker.start()
        try:
            # the doomed task's executor is SIGKILLed while its first attempt is writing
            _wait_for("a doomed first attempt", (hook_dir / "doomed").exists, worker)
            executor_of(int((hook_dir / "doomed").read_text().split()[0])).kill()
            # the slow first attempt fails only once its speculative copy's output is committed
            _wait_for("a slow first attempt", (hook_dir / "slow").exists, worker)
            key = int((hook_dir / "slow").read_text().split()[1])
            leaf = next(p.id for p in t.state().partitions.values()
                        if p.is_leaf and p.region.ranges[0].min <= key < (p.region.ranges[0].max or 2**63))
            _wait_for("the commit of the slow task's speculative copy", lambda: any(
                j.partition_id == leaf and j.status == "committed" for j in t.jobs(kind="compaction")), worker)
        finally:
            (hook_dir / "release").touch()
            worker.join(WAIT)
        # the slow first attempt has failed and aborted: its Python worker is gone
        _wait_for("the end of the slow first attempt", lambda: _gone(int((hook_dir / "slow").read_text().split()[0])),
                  None)
        assert reports and [r.status for r in reports[0].results] == ["committed"] * 3, reports
        assert (hook_dir / "raised").exists(), "the slow first attempt failed after its copy was committed"
        state = t.state()
        assert len(state.references) == 3
        assert all(s.objects.head(f) is not None for f in state.files), "a committed file was deleted"
        assert ids(t) == before and sum(before.values()) == 6000

        task_events = _task_events(events)
        launched = [e for e in task_events if e["Event"] == "SparkListenerTaskStart"]
        ends = [e["Task End Reason"]["Reason"] for e in task_events if e["Event"] == "SparkListenerTaskEnd"]
        figures = {"attempts launched": len(launched),
                   "speculative": sum(e["Task Info"]["Speculative"] for e in launched),
                   "killed": ends.count("TaskKilled"), "lost with their executor": ends.count("ExecutorLostFailure"),
                   "files committed": len(state.references), "records": sum(Counter(ids(t)).values())}
        print(f"spark attempts: {figures}")
        assert figures["speculative"] >= 1 and figures["killed"] >= 1 and figures["lost with their executor"] >= 1, \
            figures

        # the losers' leftovers are orphans once their jobs are final; the sweep takes
        # them and nothing committed
        tracked = set(state.files)
        swept = sweep_orphans(s.state_store, s.objects, t.info, grace_minutes=0)
        assert not {k.replace(".sketches", ".parquet") for k in swept} & tracked
        left = {o.key.replace(".sketches", ".parquet") for o in s.objects.list(f"{t.info.table_id}/data")}
        assert left == tracked
        assert ids(t) == before
