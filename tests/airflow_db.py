"""One migrated Airflow metadata database (SQLite) per test run, copied into each test's
AIRFLOW_HOME.

``airflow db migrate`` costs a fresh interpreter about 5 s of CPU, and the tests that
start Airflow of their own (the DAG tests' homes on each xdist worker, the provider's,
the live API server's, the plugin's auth child) each ran it: 6-7 times a run. The
schema does not depend on the home, so the first test to ask migrates a database under
the run's base temporary directory, shared by every xdist worker, with a file lock
against a second worker doing the same meanwhile; everyone else copies the file.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
DB_FILE = "airflow.db"


def shared_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's directory shared by all xdist workers (each worker's base temp is a
    child of it), or this session's own base temp without xdist."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def migrated_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The path of this run's migrated ``airflow.db`` (migrated on the first call)."""
    root = shared_root(tmp_path_factory)
    done = root / "airflow-migrated" / DB_FILE
    with open(root / "airflow-migrated.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            work = root / f"airflow-migrating-{os.getpid()}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir()
            env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW", "SLEEPER_"))}
            env.update(AIRFLOW_HOME=str(work), AIRFLOW__CORE__LOAD_EXAMPLES="False",
                       PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
            proc = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, capture_output=True, text=True,
                                  timeout=300)
            assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            done.parent.mkdir(exist_ok=True)
            shutil.copyfile(work / DB_FILE, done.with_suffix(".tmp"))
            os.replace(done.with_suffix(".tmp"), done)
            shutil.rmtree(work, ignore_errors=True)
    return done


def seed_home(home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``home`` (created if missing) holding a copy of the run's migrated database as
    ``airflow.db``, Airflow's default SQLite path in an AIRFLOW_HOME; returns ``home``."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_db(tmp_path_factory), home / DB_FILE)
    return home
