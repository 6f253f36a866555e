"""What an Airflow run's task instances and their logs say, read over Airflow's REST API:
a task's log for the tests that check what it logged, and a report of a run for the
failure messages of tests whose runs end otherwise than expected; and the parse of a
DAG file asked for now, for tests that wait for the DAGs of a table they just created."""

from __future__ import annotations

from typing import Any


def task_log(client: Any, dag_id: str, run_id: str, task_id: str, try_number: int) -> str:
    """The whole log of one try of a task, one JSON event per line (``application/x-ndjson``)."""
    r = client.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}",
                   params={"full_content": True}, headers={"Accept": "application/x-ndjson"})
    return str(r.text)


def run_report(client: Any, dag_id: str, run_id: str, tail: int = 3000) -> str:
    """Each task instance of the run (state, times, try, host, pid), with the last ``tail``
    characters of the log of each that did not succeed and was tried, then Airflow's event
    log of the run (who set which state: a scheduler's "state mismatch" is there); what
    could not be read is said, never raised, so the report cannot hide the failure it explains."""
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
    try:  # Airflow's own record of who changed a state: e.g. the scheduler's "state mismatch"
        logs = client.get("/api/v2/eventLogs", params={"dag_id": dag_id, "run_id": run_id, "limit": 50}).json()
        for e in logs.get("event_logs", []):
            out.append(f"  event {e.get('when')} {e.get('task_id')} {e.get('event')}: {str(e.get('extra'))[:600]}")
    except Exception as e:
        out.append(f"  (the run's event log could not be read: {e!r})")
    return "\n".join(out)


def request_parse(client: Any, operation: str) -> bool:
    """Ask the DAG processor to parse the DAG file of ``operation`` (``sleeper_<operation>.py``,
    every table's DAG of that operation) now, as the UI's Reparse button does
    (``PUT /api/v2/parseDagFile/{file_token}``), instead of at its next periodic parse (every
    ``min_file_process_interval``: 30 s under ``sleeper airflow``). For a test that has just
    created a table and waits for its DAG; the wait itself proves the DAG was made. Airflow
    names a file only through a DAG it holds from it (a stale one will do), so for a file
    that has given none yet this asks nothing and answers False: the periodic parse brings
    the DAG then."""
    r = client.get("/api/v2/dags", params={"limit": 1000, "exclude_stale": False})
    assert r.status_code == 200, r.text
    file = f"sleeper_{operation}.py"
    token = next((d["file_token"] for d in r.json()["dags"] if d["relative_fileloc"] == file), None)
    if token is None:
        return False
    r = client.put(f"/api/v2/parseDagFile/{token}")
    assert r.status_code == 201, f"{file}: {r.status_code} {r.text}"
    return True
