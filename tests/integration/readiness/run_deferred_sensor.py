"""Run in a subprocess by test_readiness.py: dag.test() ``wait_for_rows`` (its sensor
deferrable), ingesting ``argv[2]`` into ``events`` only once the deferred sensor's
trigger has polled and found the rows not yet visible. Prints "RESULT <json>"."""

from __future__ import annotations

import json
import sys
import threading

from airflow.dag_processing.dagbag import DagBag

from sleeper_ops import Sleeper
from sleeper_ops.airflow.triggers.visible import SleeperVisibleTrigger

polls: list[bool] = []
not_yet = threading.Event()
original = SleeperVisibleTrigger._check


def counted(self: SleeperVisibleTrigger) -> bool:
    ok = original(self)
    polls.append(ok)
    if not ok:
        not_yet.set()
    return ok


SleeperVisibleTrigger._check = counted  # type: ignore[method-assign]


def ingest_when_the_trigger_waits() -> None:
    if not_yet.wait(120):
        with Sleeper() as sleeper:
            sleeper.table("events").ingest([sys.argv[2]])


threading.Thread(target=ingest_when_the_trigger_waits, daemon=True).start()
bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
run = bag.dags["wait_for_rows"].test(run_conf={"records": int(sys.argv[3])})
wait = next(ti for ti in run.get_task_instances() if ti.task_id == "wait")
print("RESULT " + json.dumps({"run": str(run.state), "wait": str(wait.state), "polls": polls}), flush=True)
