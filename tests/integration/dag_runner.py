"""Run by tests/integration/test_dags.py in a subprocess (Airflow's configuration is
fixed at import, so every scenario gets a fresh interpreter with its own environment).

    python dag_runner.py parse DAGS_FOLDER
        Parse the folder with a DagBag; print one JSON line: the DAGs (id, schedule,
        params, tags, tasks), import errors, parse seconds and how many catalog
        (list_tables) queries were made.
    python dag_runner.py test DAGS_FOLDER '[{"dag_id": ..., "conf": {...}, "logical_date": ISO}, ...]'
        Run each DAG with dag.test() in turn (at ``logical_date`` when given); print "=== RUN i ===" before each run's
        log and one JSON line at the end: each run's state and task states.
    python dag_runner.py serve DAGS_FOLDER
        Like ``test``, for many requests in one interpreter (Airflow imported and its
        in-process execution API built once, not once per test): each line on stdin is a
        JSON request {"env": {...}, "runs": [...]} (or {"env": ..., "parse": FOLDER,
        "cwd": DIR} for what ``parse`` answers); the environment is reset to the
        server's own plus ``env`` (SLEEPER_HOME and the like, never AIRFLOW_* settings,
        which Airflow reads at import; a PYTHONPATH goes on ``sys.path`` for the request
        alone), the catalog cache is cleared, the folder is parsed
        afresh and the runs are made as ``test`` makes them. Each answer ends with a line
        "=== DONE ===".
    A line "RESULT <json>" carries the answer; everything else is Airflow's log.
"""

from __future__ import annotations

import json
import sys
import time

_calls = [0]


def _count_catalog_queries() -> list[int]:
    """The number of catalog (list_tables) queries since this call, in ``[0]``; the
    counting wrappers are installed once per process."""
    from statestore import memory, postgres

    for cls in (postgres.PostgresStateStore, memory.InMemoryStateStore):
        original = cls.list_tables
        if getattr(original, "_counted", False):
            continue

        def counted(self, _original=original):  # type: ignore[no-untyped-def]
            _calls[0] += 1
            return _original(self)

        counted._counted = True  # type: ignore[attr-defined]
        cls.list_tables = counted  # type: ignore[method-assign]
    _calls[0] = 0
    return _calls


def _schedule(timetable) -> str:  # type: ignore[no-untyped-def]
    if type(timetable).__name__ == "AssetOrTimeSchedule":  # "<cron> or <asset uris>"
        uris = sorted(asset.uri for _, asset in timetable.asset_condition.iter_assets())
        return f"{_schedule(timetable.timetable)} or {' '.join(uris)}"
    return (getattr(timetable, "expression", None) or getattr(timetable, "_expression", None)
            or type(timetable).__name__)


def _describe(dag) -> dict:  # type: ignore[no-untyped-def]
    timetable = dag.timetable
    return {
        "schedule": _schedule(timetable),
        "timetable": type(timetable).__name__,
        "params": {k: dag.params[k] for k in dag.params},
        "tags": sorted(dag.tags),
        "max_active_runs": dag.max_active_runs,
        "allowed_run_types": sorted(str(getattr(t, "value", t)) for t in dag.allowed_run_types)
        if getattr(dag, "allowed_run_types", None) else None,
        "paused_on_creation": dag.is_paused_upon_creation,
        "tasks": {t.task_id: {"type": type(t).__name__, "downstream": sorted(t.downstream_task_ids),
                              "setup": t.is_setup, "teardown": t.is_teardown, "pool": t.pool}
                  for t in dag.tasks},
    }


def parse(folder: str) -> dict:
    from airflow.dag_processing.dagbag import DagBag

    import sleeper_ops.orchestration.dag_factory  # noqa: F401 - imported before timing, as a warm dag processor has it

    calls = _count_catalog_queries()
    started = time.perf_counter()
    bag = DagBag(dag_folder=folder)
    seconds = time.perf_counter() - started
    return {"dags": {d: _describe(dag) for d, dag in bag.dags.items()}, "import_errors": bag.import_errors,
            "seconds": seconds, "catalog_queries": calls[0]}


def _asset_events(dag_id: str, run_id: str) -> list[dict]:
    """The asset events a run emitted: uri and extra."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    with create_session() as session:
        events = session.query(AssetEvent).filter(AssetEvent.source_dag_id == dag_id,
                                                  AssetEvent.source_run_id == run_id).all()
        return [{"uri": e.asset.uri, "extra": dict(e.extra or {})} for e in events]


def test(folder: str, runs: list[dict]) -> list[dict]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=folder)
    if bag.import_errors:
        raise SystemExit(f"import errors: {bag.import_errors}")
    out = []
    for i, run in enumerate(runs):
        print(f"=== RUN {i} ===", flush=True)
        dag = bag.dags[run["dag_id"]]
        kwargs = {}
        if run.get("logical_date"):
            from datetime import datetime

            kwargs["logical_date"] = datetime.fromisoformat(run["logical_date"])
        dr = dag.test(run_conf=run.get("conf"), **kwargs)
        result = {"dag_id": run["dag_id"], "state": str(dr.state),
                  "tasks": {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}}
        if run.get("logical_date"):  # the date the run's data interval starts on, as Airflow gave it
            result["data_interval_start"] = dr.data_interval_start.date().isoformat()
        events = _asset_events(run["dag_id"], dr.run_id)
        if events:  # only runs that announced commits carry the key
            result["asset_events"] = events
        out.append(result)
        print(f"=== END {i} ===", flush=True)
    return out


def serve(folder: str) -> None:
    import os
    import traceback

    from sleeper_ops.orchestration.dag_factory import clear_catalog_cache

    base, home = dict(os.environ), os.getcwd()
    given: set[str] = set()
    for line in sys.stdin:
        request = json.loads(line)
        for key in given:  # the last request's variables undone
            if key in base:
                os.environ[key] = base[key]
            else:
                os.environ.pop(key, None)
        given = set(request["env"])
        os.environ.update(request["env"])
        paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:0] = paths
        clear_catalog_cache()
        try:
            os.chdir(request.get("cwd") or home)
            result = parse(request["parse"]) if "parse" in request else test(folder, request["runs"])
            print("RESULT " + json.dumps(result, default=str), flush=True)
        except BaseException:  # the test reads the traceback; the server serves on
            traceback.print_exc(file=sys.stdout)
        finally:
            del sys.path[:len(paths)]
        print("=== DONE ===", flush=True)


if __name__ == "__main__":
    mode, folder = sys.argv[1], sys.argv[2]
    if mode == "serve":
        serve(folder)
        raise SystemExit(0)
    result = parse(folder) if mode == "parse" else test(folder, json.loads(sys.argv[3]))
    print("RESULT " + json.dumps(result, default=str), flush=True)
