"""The Airflow provider face: the providers manager finds the connection type, hook,
operators and plugin; the user DAG of docs/usage/your-own-dags.md, built from the
operators, runs under dag.test() against PostgreSQL through a ``sleeper`` connection (no
SLEEPER_HOME).

Airflow fixes its configuration at import, so Airflow runs in a subprocess
(``dag_runner.py``) with its own AIRFLOW_HOME.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops import Sleeper
from sleeper_ops.airflow.hooks.connection import EXTRA_KEYS
from sleeper_ops.config import SleeperConfig

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("dag_runner.py")
BIN = Path(sys.executable).parent
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}


def _env(airflow_home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    env["AIRFLOW_HOME"] = str(airflow_home)
    env.update(extra)
    return env


def _result(proc: subprocess.CompletedProcess[str]) -> Any:
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"no result from the Airflow subprocess (exit {proc.returncode}):\n"
                         f"{proc.stdout[-5000:]}\n{proc.stderr[-3000:]}")


def readme_user_dag() -> str:
    """The DAG shown in docs/usage/your-own-dags.md under the ``user-dag`` marker."""
    text = (REPO / "docs" / "usage" / "your-own-dags.md").read_text()
    m = re.search(r"<!-- user-dag:[^>]*-->\s*```python\n(.*?)```", text, re.S)
    assert m, "docs/usage/your-own-dags.md lost its user DAG example"
    return m.group(1)


@pytest.fixture(scope="module")
def migrated_airflow_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.airflow_db import seed_home

    return seed_home(tmp_path_factory.mktemp("airflow-provider"), tmp_path_factory)


def test_providers_manager_lists_the_sleeper_provider(tmp_path: Path) -> None:
    code = ("import json\nfrom airflow.providers_manager import ProvidersManager\npm = ProvidersManager()\n"
            "hook = pm.hooks['sleeper']\n"
            "print('RESULT ' + json.dumps({'providers': sorted(p for p in pm.providers if 'sleeper' in p),"
            " 'hook': hook.hook_class_name if hook else None, 'hook_name': hook.hook_name if hook else None,"
            " 'fields': sorted(pm.field_behaviours.get('sleeper', {}).get('relabeling', {})),"
            " 'widgets': sorted(k for k in pm.connection_form_widgets if k.startswith('extra__sleeper__')),"
            " 'asset_handler': getattr(pm.asset_uri_handlers.get('sleeper'), '__name__', None),"
            " 'lineage': getattr(pm.asset_to_openlineage_converters.get('sleeper'), '__name__', None),"
            " 'links': sorted(c for c in pm.extra_links_class_names if 'sleeper' in c)}))\n")
    proc = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    result = _result(proc)
    assert result["providers"] == ["sleeper-airflow"]
    assert result["hook"] == "sleeper_ops.airflow.hooks.sleeper.SleeperHook"
    assert result["hook_name"] == "Sleeper"
    assert {"host", "schema", "login", "password"} <= set(result["fields"])
    assert result["widgets"] == sorted(f"extra__sleeper__{k}" for k in EXTRA_KEYS)
    assert (result["asset_handler"], result["lineage"]) == ("sanitize_uri", "convert_asset_to_openlineage")
    assert result["links"] == ["sleeper_ops.airflow.links.sleeper.SleeperTableLink"]


def _connection_json(pg_dsn: str, data_dir: Path) -> str:
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(pg_dsn)
    return json.dumps({"conn_type": "sleeper", "host": parts.get("host"), "port": int(parts.get("port") or 5432),
                       "login": parts.get("user"), "password": parts.get("password"), "schema": parts["dbname"],
                       "extra": {"object_store_uri": str(data_dir)}})


def test_readme_user_dag_runs_under_dag_test_through_a_sleeper_connection(
        tmp_path: Path, migrated_airflow_home: Path, pg_dsn: str) -> None:
    # Given a table on PostgreSQL and a day of records landed as Parquet
    data_dir, landing, dags = tmp_path / "data", tmp_path / "landing", tmp_path / "dags"
    for d in (landing, dags):
        d.mkdir()
    airflow_home = tmp_path / "airflow"
    shutil.copytree(migrated_airflow_home, airflow_home)
    raw = {"object_store": {"uri": str(data_dir)}, "state_store": {"backend": "postgres", "dsn": pg_dsn}}
    config = SleeperConfig.from_dict(tmp_path / "unused-home", raw)
    n = 30_000
    with Sleeper(config=config) as s:
        s.create_table("events", SCHEMA, split_points=["k5"],
                       properties={"sleeper.table.compaction.strategy": "basic",
                                   "sleeper.table.compaction.files.batch.size": "2"})
        # records already in the table, so compaction has two files per leaf to merge
        s.table("events").ingest(pa.table({"key": [f"k{i % 10}-{i:06d}" for i in range(0, n, 3)],
                                           "ts": list(range(0, n, 3)), "value": ["old"] * len(range(0, n, 3))}))
    day = datetime.now(UTC).strftime("%Y-%m-%d")  # dag.test() runs at now: ds is today
    pq.write_table(pa.table({"key": [f"k{i % 10}-{i:06d}" for i in range(n)], "ts": list(range(n)),
                             "value": [f"v{i}" for i in range(n)]}), landing / f"{day}.parquet")
    (dags / "events_daily.py").write_text(readme_user_dag())

    # When the documented DAG runs, with only a sleeper_default connection (no SLEEPER_HOME)
    proc = subprocess.run(
        [sys.executable, str(RUNNER), "test", str(dags),
         json.dumps([{"dag_id": "events_daily", "conf": {"landing": str(landing)}}])],
        cwd=airflow_home, capture_output=True, text=True, timeout=600,
        env=_env(airflow_home, AIRFLOW__CORE__DAGS_FOLDER=str(dags),
                 AIRFLOW_CONN_SLEEPER_DEFAULT=_connection_json(pg_dsn, data_dir)))
    result = _result(proc)

    # Then every task succeeded, and every record is there exactly once
    assert result[0]["state"] == "success", proc.stdout[-5000:]
    assert result[0]["tasks"] == {"ingest": "success", "split": "success", "compact": "success", "gc": "success"}
    with Sleeper(config=config) as s:
        t = s.table("events")
        everything = t.query(ranges=[("", None)])
        assert everything.num_rows == n + len(range(0, n, 3))
        assert everything.filter(pa.compute.equal(everything["value"], "v29999")).num_rows == 1
        jobs = t.jobs(kind="compaction")
        assert jobs and all(j.status == "committed" for j in jobs)
        assert all(j.run_id and j.run_id.startswith("events_daily/") for j in jobs)
        # the two files of each leaf were merged into one
        state = t.state()
        leaves = [p.id for p in state.partitions.values() if p.is_leaf]
        assert sorted(pid for _, pid in state.references) == sorted(leaves)
    assert "compaction jobs" in proc.stdout
