"""Run in a subprocess by test_readiness.py: dag.test() the upstream DAG, then the
downstream DAG with the upstream's asset event extras as its conf (what the
scheduler hands a DAG scheduled on the asset). Prints "RESULT <json>"."""

from __future__ import annotations

import json
import sys

from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetEvent
from airflow.utils.session import create_session

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
up = bag.dags["upstream"].test(run_conf={"file": sys.argv[2]})
with create_session() as session:
    events = [dict(e.extra or {}) for e in session.query(AssetEvent).filter(AssetEvent.source_run_id == up.run_id)]
down = bag.dags["downstream"].test(run_conf=events[0])
read = next(ti for ti in down.get_task_instances() if ti.task_id == "read")
print("RESULT " + json.dumps({"up": str(up.state), "down": str(down.state), "events": events,
                              "read": str(read.state)}, default=str), flush=True)
