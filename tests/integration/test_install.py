"""Installing the wheel (not editable) into a fresh venv gives a working product.

The wheel is built from a copy of the tracked files (so nothing in the checkout is
touched), installed with the dependencies it declares at the pinned constraints into a
new venv (by uv, as ``make install`` installs, or pip without it), and then used from a
directory outside the checkout: ``sleeper table create``, ``ingest`` and ``query`` on
the embedded PostgreSQL. The migrations, the Spark app and the DAG files must come from
the installed package, and the Airflow plugin and provider entry points must be there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "sortKeyFields": [{"name": "ts", "type": "LongType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-3000:]}")
    return proc


def _install(venv: Path, wheel: Path, cwd: Path) -> None:
    """The wheel and the dependencies it declares, at the pinned versions, into ``venv``:
    by uv from its cache when that holds them all (``make install`` filled it; seconds,
    where pip took a minute), else from the index; then ``pip check`` says every
    requirement of every installed package is met."""
    python = str(venv / "bin" / "python")
    uv = Path(sys.executable).with_name("uv")
    install = [str(uv), "pip", "install", "-q", "--python", python, str(wheel), "-c", str(REPO / "constraints.txt")]
    if not uv.exists():
        _run([python, "-m", "pip", "install", "-q", str(wheel), "-c", str(REPO / "constraints.txt")], cwd=cwd,
             timeout=900)
    elif subprocess.run([*install, "--offline"], cwd=cwd, capture_output=True, timeout=900).returncode != 0:
        _run(install, cwd=cwd, timeout=900)
    _run([python, "-m", "pip", "check"], cwd=cwd)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the tracked files."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)], cwd=out)
    (w,) = out.glob("sleeper_airflow-*.whl")
    return w


def test_the_wheel_carries_migrations_spark_apps_dag_files_and_entry_points(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    sql = {n for n in names if n.startswith("statestore/postgres/ddl/") and n.endswith(".sql")}
    assert {Path(n).name for n in sql} == {p.name for p in (REPO / "include" / "sql").glob("*.sql")}
    assert {"sleeper_ops/spark/apps/compaction.py", "sleeper_ops/spark/apps/bulk_import.py"} <= names
    # every package of the checkout is in the wheel (a sub-package left out breaks only the installed copy)
    for root, top in (("plugins/sleeper_ops", "sleeper_ops"), ("statestore", "statestore")):
        for init in (REPO / root).rglob("__init__.py"):
            rel = init.relative_to(REPO / root).as_posix()
            assert f"{top}/{rel}" in names, f"{top}/{rel} is missing from the wheel"
    assert {Path(n).name for n in names if n.startswith("sleeper_ops/orchestration/dag_files/")} >= {
        p.name for p in (REPO / "dags").glob("sleeper_*.py")}
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "sleeper_ops.orchestration.plugin:SleeperPlugin" in text
    assert "sleeper_ops.airflow.get_provider_info:get_provider_info" in text
    assert "sleeper = sleeper_ops.cli:main" in text
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_installed_copy_creates_ingests_and_queries_outside_the_checkout(wheel: Path, tmp_path: Path,
                                                                           server_dir: Path) -> None:
    # Given a fresh venv with the wheel and its pinned dependencies, and a directory
    # outside the checkout
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    _install(venv, wheel, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "PYTHON", "VIRTUAL_ENV"))}
    env["SLEEPER_HOME"] = str(server_dir / "home")
    where = _run([str(venv / "bin" / "python"), "-c",
                  "import json, sleeper_ops, statestore\n"
                  "from statestore.postgres import MIGRATIONS_DIR\n"
                  "from sleeper_ops.spark.submit import spark_app_path\n"
                  "from sleeper_ops.orchestration.standalone import DAGS_FOLDER\n"
                  "print(json.dumps([sleeper_ops.__file__, statestore.__file__, str(MIGRATIONS_DIR),"
                  " str(spark_app_path()), str(DAGS_FOLDER)]))"], cwd=work, env=env)
    site = str(venv)
    for path in json.loads(where.stdout):
        assert path.startswith(site) and not path.startswith(str(REPO)), path
    (work / "schema.json").write_text(json.dumps(SCHEMA))
    n = 5000
    pacsv.write_csv(pa.table({"key": [f"k{i:05d}" for i in range(n)], "ts": list(range(n)),
                              "value": [f"v{i}" for i in range(n)]}), work / "in.csv")
    sleeper = str(venv / "bin" / "sleeper")

    # When a user creates a table, ingests and queries with the installed command
    _run([sleeper, "table", "create", "events", "--schema", "schema.json"], cwd=work, env=env)
    ingested = _run([sleeper, "ingest", "events", "in.csv"], cwd=work, env=env)
    one = _run([sleeper, "query", "events", "--key", '"k00042"'], cwd=work, env=env)
    some = _run([sleeper, "query", "events", "--range", '"k01000"', '"k01100"'], cwd=work, env=env)

    # Then the records are all there, once
    assert "5,000" in ingested.stdout + ingested.stderr or "5000" in ingested.stdout + ingested.stderr
    assert [json.loads(line) for line in one.stdout.splitlines()] == [{"key": "k00042", "ts": 42, "value": "v42"}]
    rows = [json.loads(line) for line in some.stdout.splitlines()]
    assert [r["ts"] for r in rows] == list(range(1000, 1100))
