"""The Sleeper DAGs: parsing from the catalog, and each DAG run with dag.test() against
PostgreSQL (the ``pg_dsn`` fixture) and local storage.

Airflow fixes its configuration when imported, so every scenario runs in a fresh
interpreter (``dag_runner.py``) with its own AIRFLOW_HOME (SQLite, migrated once per
module and copied per test) and SLEEPER_HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.maintenance.leases import OperationLease, lease_name
from tests.aging import age_files
from tests.integration.dag_server import parse_in_server, run_in_server

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
RUNNER = Path(__file__).with_name("dag_runner.py")
BIN = Path(sys.executable).parent
OPERATIONS = ("split", "compaction", "gc", "ingest_batcher", "flush")
OPTIONAL_OPERATIONS = ("bulk_import", "export")  # a DAG only for tables with a source / a destination

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}


# ----- running Airflow in a subprocess ---------------------------------------------------------
def _env(airflow_home: Optional[Path], sleeper_home: Optional[Path], **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS)
    if airflow_home is not None:
        env["AIRFLOW_HOME"] = str(airflow_home)
    if sleeper_home is not None:
        env["SLEEPER_HOME"] = str(sleeper_home)
    env.update(extra)
    return env


def _result(proc: subprocess.CompletedProcess[str]) -> Any:
    """The JSON after the last ``RESULT `` line start. Parsed up to the object's end: a
    log line another process of the run wrote to the same pipe can land right after it,
    before the newline (seen once in CI)."""
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.JSONDecoder().raw_decode(line, len("RESULT "))[0]
    raise AssertionError(f"the Airflow subprocess gave no result (exit {proc.returncode}):\n"
                         f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")


@dataclass
class Runs:
    results: list[dict[str, Any]]
    logs: list[str]


def _split_logs(output: str, n: int) -> list[str]:
    logs = []
    for i in range(n):
        start = output.index(f"=== RUN {i} ===")
        end = output.index(f"=== END {i} ===", start)
        logs.append(output[start:end])
    return logs


def _start_runs(airflow_home: Path, sleeper_home: Path, runs: list[dict[str, Any]],
                **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(RUNNER), "test", str(DAGS), json.dumps(runs)], cwd=airflow_home,
                            env=_env(airflow_home, sleeper_home, **extra), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _finish_runs(proc: subprocess.Popen[str], n: int) -> Runs:
    out, _ = proc.communicate(timeout=300)
    result = _result(subprocess.CompletedProcess(proc.args, proc.returncode, out, ""))
    return Runs(result, _split_logs(out, n))


def runs_of(output: str, n: int) -> Runs:
    """The ``n`` runs a DAG server's ``output`` reports."""
    return Runs(_result(subprocess.CompletedProcess([], 0, output, "")), _split_logs(output, n))


def run_dags(airflow_home: Path, sleeper_home: Path, *runs: dict[str, Any], **extra: str) -> Runs:
    """dag.test() each of ``runs`` ({"dag_id": ..., "conf": {...}}) in turn: in this
    worker's DAG server for ``airflow_home`` (:mod:`dag_server`), or in a subprocess of
    their own when ``extra`` sets what Airflow reads only at start-up (a connection,
    ``AIRFLOW_CONN_*``, is looked up in the environment when a task asks; the server puts
    a ``PYTHONPATH`` on ``sys.path`` for the runs)."""
    if any(k.startswith("AIRFLOW") and not k.startswith("AIRFLOW_CONN_") for k in extra):
        return _finish_runs(_start_runs(airflow_home, sleeper_home, list(runs), **extra), len(runs))
    out = run_in_server(DAGS, airflow_home, _env(airflow_home, None),
                        {"SLEEPER_HOME": str(sleeper_home), **extra}, list(runs))
    return runs_of(out, len(runs))


def parse_dags(airflow_home: Path, sleeper_home: Optional[Path], folder: Path = DAGS, cwd: Optional[Path] = None,
               **extra: str) -> dict[str, Any]:
    """What ``dag_runner.py parse`` answers for ``folder``, parsed in this worker's DAG
    server with ``extra`` and SLEEPER_HOME (unless None) set, and ``cwd`` (default: the
    Airflow home) the working directory; ``log``: the parse's output."""
    env = {**extra, **({"SLEEPER_HOME": str(sleeper_home)} if sleeper_home else {})}
    out = parse_in_server(folder, airflow_home, _env(airflow_home, None), env, cwd or airflow_home)
    result = _result(subprocess.CompletedProcess([], 0, out, ""))
    result["log"] = out
    return result


# ----- fixtures --------------------------------------------------------------------------------
@pytest.fixture
def sleeper_home(tmp_path: Path, pg_dsn: str) -> Path:
    home = tmp_path / "sleeper"
    home.mkdir()
    (home / "sleeper.toml").write_text(textwrap.dedent(f"""\
        [object_store]
        uri = "data"
        [state_store]
        backend = "postgres"
        dsn = "{pg_dsn}"
        [iterators]
        python_modules = ["dag_gated_iterator"]
        """))
    return home


@pytest.fixture
def sleeper(sleeper_home: Path) -> Iterator[Sleeper]:
    with Sleeper(sleeper_home) as s:
        yield s


def _rows(n: int, seed: int) -> pa.Table:
    keys = [f"key-{(i * 7919 + seed * 104729) % 100000:06d}" for i in range(n)]
    return pa.table({"key": keys, "ts": pa.array(range(n), pa.int64()), "value": [f"v{seed}-{i}" for i in range(n)]})


def _filled_table(sleeper: Sleeper, name: str, ingests: int = 3, rows: int = 1000, **props: str) -> Any:
    table = sleeper.create_table(name, SCHEMA, split_points=["key-050000"],
                                 properties={"sleeper.table.compaction.strategy": "basic", **props})
    for seed in range(ingests):
        table.ingest(_rows(rows, seed))
    return table


def _references_per_leaf(table: Any) -> dict[str, int]:
    state = table.state()
    counts = {p.id: 0 for p in state.partitions.values() if p.is_leaf}
    for ref in state.references.values():
        counts[ref.partition_id] += 1
    return counts


# ----- parsing -----------------------------------------------------------------------------------
def test_dag_files_import_without_a_sleeper_home(airflow_home: Path, tmp_path: Path) -> None:
    result = parse_dags(airflow_home, None, cwd=tmp_path)
    assert result["import_errors"] == {}
    assert result["dags"] == {}
    assert "no Sleeper configuration" in result["log"]


def test_one_dag_per_table_per_operation_with_schedules_and_params_from_properties(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path) -> None:
    sleeper.create_table("events", SCHEMA)
    sleeper.create_table("logs", SCHEMA, properties={"sleeper.table.schedule.compaction": "none",
                                                     "sleeper.table.schedule.gc": "@hourly",
                                                     "sleeper.table.compaction.runner": "spark"})
    result = parse_dags(airflow_home, sleeper_home)
    assert result["import_errors"] == {}
    dags = result["dags"]
    assert sorted(dags) == sorted(f"sleeper_{t}_{op}" for t in ("events", "logs") for op in OPERATIONS)
    # on its cron, or when files are committed to the table (the asset sleeper://events)
    assert dags["sleeper_events_compaction"]["schedule"] == "*/5 * * * * or sleeper://events/"
    assert dags["sleeper_logs_compaction"]["schedule"] == "NullTimetable"  # 'none': manual runs only
    assert dags["sleeper_logs_gc"]["schedule"] == "0 * * * *"
    assert dags["sleeper_events_compaction"]["params"] == {"runner": "local"}
    assert dags["sleeper_logs_compaction"]["params"] == {"runner": "spark"}
    assert dags["sleeper_events_gc"]["params"] == {"dry_run": False}
    assert dags["sleeper_events_split"]["tags"] == ["sleeper", "split", "table:events"]
    assert all(d["max_active_runs"] == 1 for d in dags.values())
    compaction = dags["sleeper_events_compaction"]["tasks"]
    assert compaction["create_jobs"]["setup"] and compaction["report"]["teardown"]
    assert compaction["create_jobs"]["downstream"] == ["report", "run_local", "run_spark"]
    # the generated DAGs are built from the provider's own operators
    assert compaction["create_jobs"]["type"] == "SleeperCreateCompactionJobsOperator"
    assert compaction["run_local"]["type"] == "SleeperRunCompactionJobsOperator"
    assert compaction["run_spark"]["type"] == "SleeperSparkCompactionOperator"
    assert compaction["report"]["type"] == "SleeperCompactionReportOperator"
    assert dags["sleeper_events_split"]["tasks"]["split"]["type"] == "SleeperSplitOperator"
    assert dags["sleeper_events_gc"]["tasks"]["gc"]["type"] == "SleeperGcOperator"
    assert dags["sleeper_events_ingest_batcher"]["tasks"]["ingest_batcher"]["type"] == "SleeperIngestBatcherOperator"
    assert compaction["run_spark"]["pool"] == "spark"
    # the flush DAG: on its cron, or when the buffer passes its thresholds (the watched asset)
    assert dags["sleeper_events_flush"]["tasks"]["flush"]["type"] == "SleeperFlushOperator"
    assert dags["sleeper_events_flush"]["schedule"] == "* * * * * or sleeper://events/buffer"


def test_parsing_100_tables_takes_one_catalog_query(sleeper: Sleeper, sleeper_home: Path, airflow_home: Path) -> None:
    """The DAG files share one catalog read however many tables there are (what keeps
    parsing fast; its time is not asserted: a loaded machine says nothing about it)."""
    for i in range(100):
        sleeper.create_table(f"t{i:03d}", SCHEMA)
    result = parse_dags(airflow_home, sleeper_home)
    assert result["import_errors"] == {}
    assert len(result["dags"]) == 100 * len(OPERATIONS)
    assert result["catalog_queries"] == 1  # the DAG files share one read


def test_parsing_context_builds_only_the_dag_being_run(sleeper: Sleeper, sleeper_home: Path,
                                                       airflow_home: Path) -> None:
    for name in ("a", "b"):
        sleeper.create_table(name, SCHEMA)
    result = parse_dags(airflow_home, sleeper_home, _AIRFLOW_PARSING_CONTEXT_DAG_ID="sleeper_b_gc")
    assert list(result["dags"]) == ["sleeper_b_gc"]
    assert result["catalog_queries"] == 1


def test_an_unreachable_catalog_breaks_only_the_sleeper_dag_files(sleeper_home: Path, airflow_home: Path,
                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "dags"
    shutil.copytree(DAGS, folder)
    (folder / "other_dag.py").write_text(textwrap.dedent("""\
        from airflow.sdk import DAG
        dag = DAG("someone_elses_dag", schedule=None)
        """))
    result = parse_dags(airflow_home, sleeper_home, folder,
                        SLEEPER_STATE_STORE_DSN=f"postgresql://nobody@/sleeper?host={tmp_path / 'no-server'}")
    assert list(result["dags"]) == ["someone_elses_dag"]
    assert sorted(Path(f).name for f in result["import_errors"]) == sorted(
        f"sleeper_{op}.py" for op in (*OPERATIONS, *OPTIONAL_OPERATIONS))
    assert all("state store" in e for e in result["import_errors"].values())


@pytest.mark.parametrize("breakage", ["a name from before the rule", "a property Airflow refuses"])
def test_walk_finding_1_a_table_whose_dags_cannot_be_built_breaks_no_other_table(
        sleeper: Sleeper, sleeper_home: Path, airflow_home: Path, pg_dsn: str, breakage: str) -> None:
    """Issue 34 finding 1: a 150-character name (legal then) made every DAG file fail to
    import. Written straight to the state store, as an older release could leave them."""
    import psycopg
    from psycopg.types.json import Jsonb

    from statestore.partitions import partitions_from_split_points
    from statestore.schema import Schema

    sleeper.create_table("events", SCHEMA)
    if breakage == "a name from before the rule":
        broken, files = "t" * 150, OPERATIONS
        schema = Schema.from_dict(SCHEMA)
        sleeper.state_store.create_table(broken, schema, partitions_from_split_points(schema, ()), {})
    else:
        broken, files = "weekly", ("gc",)
        sleeper.create_table(broken, SCHEMA)
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # past the property check
            conn.execute("UPDATE tables SET properties = properties || %s WHERE name = %s",
                         (Jsonb({"sleeper.table.schedule.gc": "every tuesday"}), broken))
    result = parse_dags(airflow_home, sleeper_home)
    assert sorted(d for d in result["dags"] if "_events_" in d) == sorted(f"sleeper_events_{op}" for op in OPERATIONS)
    assert sorted(Path(f).name for f in result["import_errors"]) == sorted(f"sleeper_{op}.py" for op in files)
    for error in result["import_errors"].values():
        assert f"table {broken!r}" in error, error


# ----- running each DAG ----------------------------------------------------------------------------
def test_compaction_dag_leaves_one_file_per_leaf(sleeper: Sleeper, sleeper_home: Path, airflow_home: Path,
                                                 tmp_path: Path) -> None:
    table = _filled_table(sleeper, "events")
    assert set(_references_per_leaf(table).values()) == {3}
    inputs = sorted(sleeper.objects.uri_of(f) for f in table.state().files)
    lineage = tmp_path / "lineage"
    lineage.mkdir()
    transport = {"type": "file", "log_file_path": str(lineage / "events.jsonl"), "append": True}
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction"},
                    AIRFLOW__OPENLINEAGE__TRANSPORT=json.dumps(transport))
    assert runs.results[0]["state"] == "success"
    assert runs.results[0]["tasks"] == {"create_jobs": "success", "run_local": "success", "run_spark": "skipped",
                                        "report": "success"}
    assert set(_references_per_leaf(table).values()) == {1}
    assert table.query(ranges=[("", None)]).num_rows == 3000
    jobs = table.jobs(kind="compaction")
    assert len(jobs) == 2 and {j.status for j in jobs} == {"committed"}
    assert all(j.run_id.startswith("sleeper_events_compaction/manual__") for j in jobs)
    assert sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction")) is None
    # OpenLineage of the run_local task: the table read and written (not the six files it merged), 3,000 rows,
    # in the namespace of the state store's own id
    events = [json.loads(line) for line in (lineage / "events.jsonl").read_text().splitlines()]
    (done,) = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"].endswith(".run_local")]
    namespace = f"sleeper://{sleeper.state_store.instance_id()}"
    assert [(d["namespace"], d["name"]) for d in done["inputs"]] == [(namespace, "events")]
    assert not {d["name"] for d in done["inputs"]} & set(inputs), "never the table's own files"
    (out,) = done["outputs"]
    assert (out["namespace"], out["name"]) == (namespace, "events")
    assert (out["outputFacets"]["outputStatistics"]["rowCount"],
            out["outputFacets"]["outputStatistics"]["fileCount"]) == (3000, 2)


def test_compaction_dag_with_nothing_to_do_releases_its_lease(sleeper: Sleeper, sleeper_home: Path,
                                                             airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events", ingests=1)
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction"})
    assert runs.results[0]["state"] == "success"
    assert runs.results[0]["tasks"]["create_jobs"] == "success"
    assert runs.results[0]["tasks"]["run_local"] == "skipped"
    assert "events: 0 new compaction jobs: nothing to compact: 2 files in 2 leaves" in runs.logs[0], "says why"
    assert sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction")) is None


@pytest.mark.slow
def test_compaction_dag_runs_the_jobs_on_spark_when_asked(sleeper: Sleeper, sleeper_home: Path,
                                                          airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events")
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction", "conf": {"runner": "spark"}},
                    AIRFLOW_CONN_SLEEPER_SPARK='{"conn_type": "spark", "host": "local[1]"}')
    assert runs.results[0]["state"] == "success", runs.logs[0][-3000:]
    assert runs.results[0]["tasks"]["run_spark"] == "success"
    assert runs.results[0]["tasks"]["run_local"] == "skipped"
    assert set(_references_per_leaf(table).values()) == {1}
    assert table.query(ranges=[("", None)]).num_rows == 3000


def test_gc_dag_dry_run_lists_and_the_real_run_deletes_unreferenced_files(sleeper: Sleeper, sleeper_home: Path,
                                                                          airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events")
    table.compact()
    age_files(sleeper.state_store, table.info.table_id)  # past the GC delay
    unreferenced = [f.filename for f in table.state().file_statuses() if not f.references]
    assert len(unreferenced) == 3  # the 3 ingests' files, each shared by both leaves
    # (conf given both times: dag.test() keeps the previous run's conf on the DAG object)
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_gc", "conf": {"dry_run": True}},
                    {"dag_id": "sleeper_events_gc", "conf": {"dry_run": False}})
    assert [r["state"] for r in runs.results] == ["success", "success"]
    assert "would delete 3 unreferenced files" in runs.logs[0]
    assert "deleted 3 unreferenced files" in runs.logs[1]
    state = table.state()
    assert all(f.references for f in state.file_statuses())
    assert all(sleeper.objects.head(name) is None for name in unreferenced)
    assert table.query(ranges=[("", None)]).num_rows == 3000


def test_split_dag_splits_partitions_over_the_threshold(sleeper: Sleeper, sleeper_home: Path,
                                                        airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events", ingests=1, rows=2000,
                          **{"sleeper.table.partition.splitting.threshold": "500"})
    before = len(table.state().partitions)
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_split"})
    assert runs.results[0]["state"] == "success"
    assert len(table.state().partitions) == before + 4  # both leaves split in two
    assert {j.status for j in table.jobs(kind="split")} == {"committed"}


def test_ingest_batcher_dag_ingests_requested_files(sleeper: Sleeper, sleeper_home: Path, airflow_home: Path,
                                                    tmp_path: Path) -> None:
    from sleeper_ops.ingest.batcher import submit_ingest_requests

    table = sleeper.create_table("events", SCHEMA, properties={"sleeper.table.ingest.batcher.job.min.size": "1"})
    files = []
    for i in range(3):
        path = tmp_path / f"in-{i}.parquet"
        pq.write_table(_rows(500, seed=i), path)
        files.append(str(path))
    submit_ingest_requests(sleeper, "events", files)
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_ingest_batcher"},
                    {"dag_id": "sleeper_events_ingest_batcher"})
    assert [r["state"] for r in runs.results] == ["success", "success"]
    assert table.query(ranges=[("", None)]).num_rows == 1500
    assert {r.status for r in sleeper.state_store.list_ingest_requests(table.info.table_id)} == {"ingested"}
    # the run that committed files announced them on the table's asset (the compaction DAG listens);
    # the second, with nothing to do, announced nothing
    files_written = len(table.state().files)
    ((event),) = runs.results[0]["asset_events"]
    assert event["uri"] == "sleeper://events/"
    assert event["extra"] == {"table": "events", "files": files_written, "rows": 1500,
                              "transaction": sleeper.state_store.transaction_number(table.info.table_id)}
    assert "asset_events" not in runs.results[1]


def test_flush_dag_files_the_buffered_records_once_and_announces_them(sleeper: Sleeper, sleeper_home: Path,
                                                                     airflow_home: Path) -> None:
    table = sleeper.create_table("events", SCHEMA, split_points=["key-050000", "zzz"])  # none at or above zzz
    for seed in range(3):
        table.write(_rows(400, seed))
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_flush"},
                    {"dag_id": "sleeper_events_flush"})
    assert [r["state"] for r in runs.results] == ["success", "success"], runs.logs
    assert table.buffer_stats().rows == 0
    assert table.query(ranges=[("", None)], buffer=False).num_rows == 1200
    assert sorted(_references_per_leaf(table).values()) == [0, 1, 1], "one file per leaf written to"
    ((event),) = runs.results[0]["asset_events"]
    assert event["uri"] == "sleeper://events/"
    assert event["extra"] == {"table": "events", "files": 2, "rows": 1200,
                              "transaction": sleeper.state_store.transaction_number(table.info.table_id),
                              "key_range": {"field": "key", "min": "", "max": "zzz"}}, "the two leaves written to"
    assert "asset_events" not in runs.results[1]  # nothing buffered: nothing committed, no event
    (job,) = table.jobs(kind="flush")
    assert job.status == "committed" and job.run_id.startswith("sleeper_events_flush/")


def test_offline_tables_are_skipped_by_maintenance(sleeper: Sleeper, sleeper_home: Path,
                                                   airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events", **{"sleeper.table.online": "false",
                                                 "sleeper.table.partition.splitting.threshold": "10"})
    table.write(_rows(10, 7))
    before = table.state().canonical()
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_split"},
                    {"dag_id": "sleeper_events_compaction"}, {"dag_id": "sleeper_events_flush"})
    assert runs.results[0] == {"dag_id": "sleeper_events_split", "state": "success", "tasks": {"split": "skipped"}}
    assert runs.results[1]["tasks"]["create_jobs"] == "skipped"
    assert runs.results[2] == {"dag_id": "sleeper_events_flush", "state": "success", "tasks": {"flush": "skipped"}}
    assert "table events is offline" in runs.logs[0] and "table events is offline" in runs.logs[2]
    assert table.state().canonical() == before
    assert table.buffer_stats().rows == 10, "the offline table's buffer is not flushed"


# ----- one run per table per operation --------------------------------------------------------------
def test_a_run_finding_the_lease_held_is_skipped_and_says_who_holds_it(sleeper: Sleeper, sleeper_home: Path,
                                                                       airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events")
    table.compact()
    age_files(sleeper.state_store, table.info.table_id)
    unreferenced = sum(1 for f in table.state().file_statuses() if not f.references)
    name = lease_name(table.info.table_id, "gc")
    with OperationLease(sleeper.state_store, name, "sleeper_events_gc/backfill__x/1"):
        runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_gc"})
    assert runs.results[0] == {"dag_id": "sleeper_events_gc", "state": "success", "tasks": {"gc": "skipped"}}
    assert f"lease {name} held by sleeper_events_gc/backfill__x/1" in runs.logs[0]
    assert sum(1 for f in table.state().file_statuses() if not f.references) == unreferenced


GATED_ITERATOR = """\
import os
import time
from pathlib import Path

GATE = Path(os.environ["SLEEPER_TEST_GATE"])


def gated(batch):
    (GATE / "started").touch()
    deadline = time.monotonic() + 300
    while not (GATE / "release").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the compaction")
        time.sleep(0.05)
    return batch
"""


def test_two_compaction_runs_at_once_one_works_the_other_skips(sleeper: Sleeper, sleeper_home: Path,
                                                               migrated_airflow_home: Path, airflow_home: Path,
                                                               tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The first run's jobs hold in a user iterator until the test releases them (a file
    as the event between the processes); the second run, started meanwhile in another
    Airflow (the worker's DAG server), finds the lease held and skips, naming the
    holder; then the first finishes."""
    module_dir, gate = tmp_path / "iterators", tmp_path / "gate"
    module_dir.mkdir()
    gate.mkdir()
    (module_dir / "dag_gated_iterator.py").write_text(GATED_ITERATOR)  # a name no other test module imports
    # the property is checked (its module imported) when set, here as in the DAG runs
    monkeypatch.syspath_prepend(str(module_dir))
    monkeypatch.setenv("SLEEPER_TEST_GATE", str(gate))
    table = _filled_table(sleeper, "events", **{"sleeper.table.iterator.python": "dag_gated_iterator:gated"})
    first_home = tmp_path / "airflow-first"
    shutil.copytree(migrated_airflow_home, first_home)
    env = {"PYTHONPATH": str(module_dir), "SLEEPER_TEST_GATE": str(gate)}
    first = _start_runs(first_home, sleeper_home, [{"dag_id": "sleeper_events_compaction"}], **env)
    finished: list[Runs] = []
    reader = threading.Thread(target=lambda: finished.append(_finish_runs(first, 1)))  # drains its output
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not (gate / "started").exists():
            assert reader.is_alive(), (f"the first run ended early: {finished and finished[0].results}\n"
                                       f"{finished and finished[0].logs[0][-4000:]}")
            assert time.monotonic() < deadline, "the first run never reached its compaction"
            time.sleep(0.1)
        second = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction"}, **env)
    finally:
        (gate / "release").touch()
        reader.join(300)
    (worked,) = finished
    assert worked.results[0]["state"] == "success" and second.results[0]["state"] == "success"
    assert worked.results[0]["tasks"]["run_local"] == "success", worked.results
    assert second.results[0]["tasks"]["create_jobs"] == "skipped", second.results
    assert f"lease {lease_name(table.info.table_id, 'compaction')} held by sleeper_events_compaction/manual__" \
        in second.logs[0]
    assert set(_references_per_leaf(table).values()) == {1}
    assert len({j.run_id for j in table.jobs(kind="compaction")}) == 1
    # (not a query: that would apply the gated iterator here too)
    assert sum(r.record_count for r in table.state().references.values()) == 3000


def test_a_failed_compaction_run_fails_and_still_releases_its_lease(sleeper: Sleeper, sleeper_home: Path,
                                                                    airflow_home: Path) -> None:
    table = _filled_table(sleeper, "events")  # each ingest one file shared by both leaves
    low = _rows(1000, 9)
    table.ingest(low.filter([k < "key-050000" for k in low.column("key").to_pylist()]))  # the first leaf's only
    (victim,) = {r.filename for r in table.state().references.values() if r.whole_file}
    sleeper.objects.delete(victim)  # one job's input is gone: that job fails, the other leaf's commits
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_compaction"})
    assert runs.results[0]["state"] == "failed"
    assert runs.results[0]["tasks"] == {"create_jobs": "success", "run_local": "failed", "run_spark": "skipped",
                                        "report": "success"}
    assert "1 failed" in runs.logs[0]
    assert sleeper.state_store.get_lease(lease_name(table.info.table_id, "compaction")) is None
    assert sorted(j.status for j in table.jobs(kind="compaction")) == ["committed", "failed"]


# ----- bulk import: dated, backfillable -----------------------------------------------------------
def test_bulk_import_dag_imports_the_runs_date_once_however_often_it_runs(sleeper: Sleeper, sleeper_home: Path,
                                                                          airflow_home: Path, tmp_path: Path) -> None:
    """Issue 10: a table with ``sleeper.table.bulk.import.source`` gets a dated bulk import
    DAG; a run reads the source rendered on its data interval, keyed by the table id and
    the interval's start, so running the same date again adds nothing. The maintenance
    DAGs refuse backfills."""
    raw = tmp_path / "raw"
    days = {}
    for i, day in enumerate(["2026-01-01", "2026-01-02"]):
        (raw / day).mkdir(parents=True)
        days[day] = _rows(3000, seed=i)
        pq.write_table(days[day], raw / day / "events.parquet")
    table = sleeper.create_table("events", SCHEMA, properties={
        "sleeper.table.bulk.import.source": f"{raw}/{{{{ data_interval_start | ds }}}}/",
        "sleeper.table.bulk.import.start": "2026-01-01",  # manual runs of earlier dates import them too
        "sleeper.table.bulk.import.min.leaf.partitions": "2", "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
    sleeper.create_table("plain", SCHEMA)
    parsed = parse_dags(airflow_home, sleeper_home)
    assert "sleeper_events_bulk_import" in parsed["dags"] and "sleeper_plain_bulk_import" not in parsed["dags"]
    assert parsed["dags"]["sleeper_events_bulk_import"]["schedule"] == "0 0 * * *"  # @daily
    assert parsed["dags"]["sleeper_events_bulk_import"]["timetable"] == "DatedImportTimetable"  # data intervals
    assert parsed["dags"]["sleeper_events_bulk_import"]["max_active_runs"] == 1
    assert parsed["dags"]["sleeper_events_bulk_import"]["allowed_run_types"] is None  # backfills welcome
    for op in ("split", "compaction", "gc", "ingest_batcher", "flush"):
        assert "backfill" not in parsed["dags"][f"sleeper_events_{op}"]["allowed_run_types"], op

    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_bulk_import",
                                                 "logical_date": "2026-01-02T00:00:00+00:00"},
                    {"dag_id": "sleeper_events_bulk_import", "logical_date": "2026-01-02T00:00:00+00:00"})
    assert [r["state"] for r in runs.results] == ["success", "success"], runs.logs
    imported = runs.results[0]["data_interval_start"]
    assert imported == "2026-01-01", "a daily interval ending at the logical date"
    assert runs.results[1]["data_interval_start"] == imported
    assert "already imported" in runs.logs[1]
    assert [e["extra"]["rows"] for e in runs.results[0]["asset_events"]] == [3000]
    assert runs.results[0]["asset_events"][0]["extra"]["import_key"]
    assert "asset_events" not in runs.results[1]  # nothing committed: no event
    got = table.query(ranges=[("", None)])
    assert got.num_rows == 3000  # that day's records, once
    assert sorted(got.column("value").to_pylist()) == sorted(days[imported].column("value").to_pylist())
    (job,) = table.jobs(kind="bulk_import")
    assert job.status == "committed" and job.run_id.startswith("sleeper_events_bulk_import/")


def test_a_dated_run_without_input_waits_for_it_then_fails_with_one_line(sleeper: Sleeper, sleeper_home: Path,
                                                                       airflow_home: Path, tmp_path: Path) -> None:
    """Issue 23 item 5: a date with no input yet waits in the deferrable sensor (its
    trigger runs in line under dag.test()) up to sleeper.table.bulk.import.wait.hours,
    then the run fails with one line naming the table, the date and the source; the
    import never starts (no job record), and no retry waits again."""
    table = sleeper.create_table("events", SCHEMA, properties={
        "sleeper.table.bulk.import.source": f"{tmp_path / 'raw'}/{{{{ data_interval_start | ds }}}}/",
        "sleeper.table.bulk.import.start": "2026-01-01",
        "sleeper.table.bulk.import.wait.hours": "0.0005"})  # 1.8 s
    started = time.monotonic()
    runs = run_dags(airflow_home, sleeper_home, {"dag_id": "sleeper_events_bulk_import",
                                                 "logical_date": "2026-01-02T00:00:00+00:00"})
    assert runs.results[0]["state"] == "failed", runs.logs
    assert runs.results[0]["tasks"] == {"wait_for_input": "failed", "bulk_import": "upstream_failed"}
    line = (f"table events: no input for the bulk import of 2026-01-01 after waiting 0.0005 h "
            f"(sleeper.table.bulk.import.wait.hours): {tmp_path / 'raw'}/2026-01-01/: no input files "
            "(.parquet, .csv or .jsonl) found")
    assert line in runs.logs[0]
    assert "running trigger in line" in runs.logs[0], "it deferred"
    assert time.monotonic() - started < 120, "one wait, no retries"
    assert table.jobs(kind="bulk_import") == []


def test_airflow_dags_test_of_a_bulk_import_date_with_only_the_two_homes_set(sleeper: Sleeper, sleeper_home: Path,
                                                                            tmp_path: Path) -> None:
    """Issue 10 item 5: ``airflow db migrate`` then ``airflow dags test
    sleeper_<t>_bulk_import 2026-01-02`` with nothing but SLEEPER_HOME and AIRFLOW_HOME
    set (the DAG files in AIRFLOW_HOME/dags, Airflow's default folder); no Airflow
    connection: Spark runs on the configuration's [spark] master. The date is before the
    table's sleeper.table.bulk.import.start: a manual run imports its date all the same
    (issue 34: it ended success with no task)."""
    for i, day in enumerate(("2026-01-01", "2026-01-02")):  # whichever interval Airflow gives the date
        (tmp_path / "raw" / day).mkdir(parents=True)
        pq.write_table(_rows(2500, seed=9 + i), tmp_path / "raw" / day / "events.parquet")
    table = sleeper.create_table("events", SCHEMA, properties={
        "sleeper.table.bulk.import.source": f"{tmp_path / 'raw'}/{{{{ data_interval_start | ds }}}}/",
        "sleeper.table.bulk.import.start": "2026-02-01",  # after the date run below
        "sleeper.table.bulk.import.min.leaf.partitions": "2", "sleeper.table.bulk.import.min.rows.per.leaf": "1"})
    airflow_home = tmp_path / "airflow-plain"
    shutil.copytree(DAGS, airflow_home / "dags")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", AIRFLOW_HOME=str(airflow_home),
               SLEEPER_HOME=str(sleeper_home))
    for cmd in (["db", "migrate"], ["dags", "test", "sleeper_events_bulk_import", "2026-01-02"]):
        r = subprocess.run([str(BIN / "airflow"), *cmd], env=env, capture_output=True, text=True, timeout=240)
        assert r.returncode == 0, f"airflow {' '.join(cmd)}: {r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert table.query(ranges=[("", None)]).num_rows == 2500
    (job,) = table.jobs(kind="bulk_import")
    assert job.status == "committed" and job.rows_written == 2500
