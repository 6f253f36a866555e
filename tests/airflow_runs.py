"""What an Airflow run's task instances and their logs say, read over Airflow's REST API:
a task's log for the tests that check what it logged, and a report of a run for the
failure messages of tests whose runs end otherwise than expected."""

from __future__ import annotations

from typing import Any


def task_log(client: Any, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """The whole log of one try of a task, one JSON event per line (``application/x-ndjson``)."""
    r = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                   params={"full_content": True}, headers={"Accept": "application/x-ndjson"})
    return str(r.text)


def run_report(client: Any, dag_id: str, run_id: str, tail: int = 3000) -> str:
    """Each task instance of the run (state, times, try, host, pid), with the last ``tail``
    characters of the log of each that did not succeed and was tried; what could not be
    read is said, never raised, so the report cannot hide the failure it explains."""
    out = []
    try:
        tis = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances").json().get("task_instances", [])
        for ti in tis:
            fields = {k: ti.get(k) for k in ("state", "start_date", "end_date", "try_number", "hostname", "pid")}
            out.append(f"  {ti['task_id']}: {fields}")
            if ti.get("state") != "success" and ti.get("try_number"):
                log = task_log(client, dag_id, run_id, ti["task_id"], ti["try_number"])
                out.append("    log: " + log[-tail:].replace("\n", "\n    "))
    except Exception as e:
        out.append(f"  (the run's task instances could not be read: {e!r})")
    return "\n".join(out)
