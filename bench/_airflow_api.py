"""A real ``airflow api-server`` over a bench's ``SLEEPER_HOME``, as ``sleeper airflow`` starts it,
and a token for it as a user gets one (``POST /auth/token``).

:func:`airflow_api_server` starts the API server alone (no scheduler: a REST lookup needs
none) with the environment of :func:`sleeper_ops.orchestration.standalone.airflow_environment`
(the one every process of ``sleeper airflow`` gets), the Sleeper plugin from its entry point,
Airflow's default SimpleAuthManager with a user ``admin`` (role admin) of a known password,
and the metadata database where ``sleeper airflow`` keeps it: a database ``airflow`` on the
state store's PostgreSQL, migrated with ``airflow db migrate``. With
``SLEEPER_BENCH_AIRFLOW_DB`` set (the smoke test's migrated SQLite file, see
tests/test_bench_smoke.py), a copy of that file is the metadata database instead and
nothing is migrated. Airflow's output goes to ``<airflow home>/api-server.log``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

PASSWORD = "bench-admin-secret"


@dataclass(frozen=True)
class AirflowApi:
    """A running API server: where it listens, and an ``admin`` token for it."""

    host: str
    port: int
    token: str
    log: Path
    pid: int
    #: the environment it runs in (for another Airflow process of the same install)
    env: dict[str, str]


def _metadata_url(airflow_home: Path, state_dsn: str) -> tuple[str, bool]:
    """The metadata database's SQLAlchemy URL and whether it still needs migrating."""
    migrated = os.environ.get("SLEEPER_BENCH_AIRFLOW_DB")
    if migrated:
        shutil.copyfile(migrated, airflow_home / "airflow.db")
        return f"sqlite:///{airflow_home / 'airflow.db'}", False
    from sleeper_ops.orchestration.standalone import AIRFLOW_DATABASE, sqlalchemy_url
    from statestore.postgres import create_database_if_missing

    create_database_if_missing(state_dsn, AIRFLOW_DATABASE)
    return sqlalchemy_url(state_dsn, AIRFLOW_DATABASE), True


@contextlib.contextmanager
def airflow_api_server(home: Path, state_dsn: str, *, checkout: Optional[Path] = None,
                       timeout: float = 300.0) -> Iterator[AirflowApi]:
    """The API server of ``sleeper airflow`` for the Sleeper at ``home`` (whose state store
    is ``state_dsn``), started, with an ``admin`` token; stopped (its process group) on leaving.
    With ``checkout`` (another checkout of this repository), the server imports that
    checkout's ``sleeper_ops`` and ``statestore`` (first on its ``PYTHONPATH``), so two
    versions can be timed in one run. Raises SystemExit if it does not answer within
    ``timeout`` seconds."""
    import httpx

    from sleeper_ops.config import SleeperConfig
    from sleeper_ops.orchestration.standalone import airflow_batch, airflow_environment, free_port, stop_process_group

    config = SleeperConfig.load(home)
    airflow_home = config.airflow_home
    (airflow_home / "plugins").mkdir(parents=True, exist_ok=True)
    (airflow_home / "passwords.json").write_text(json.dumps({"admin": PASSWORD}))
    metadata_url, migrate = _metadata_url(airflow_home, state_dsn)
    port = free_port()
    env = airflow_environment(config, state_dsn=state_dsn, metadata_url=metadata_url, port=port,
                              base={k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "_AIRFLOW"))},
                              users="admin:admin")
    env.update({"AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(airflow_home / "passwords.json"),
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(48)})
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout / "plugins"), str(checkout)])
    log_path = airflow_home / f"api-server-{port}.log"
    with open(log_path, "ab") as log:
        if migrate:
            t0 = time.perf_counter()
            airflow_batch(env, ["db", "migrate"], log=log)
            print(f"airflow db migrate (metadata on the state store's PostgreSQL) in "
                  f"{time.perf_counter() - t0:.1f}s", flush=True)
        proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "api-server",
                                 "--host", "127.0.0.1", "--port", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        token = None
        with httpx.Client(base_url=url, timeout=10.0) as client:
            while token is None:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"airflow api-server did not start; its log:\n{log_path.read_text()[-3000:]}")
                try:
                    r = client.post("/auth/token", json={"username": "admin", "password": PASSWORD})
                    if r.status_code in (200, 201):
                        token = str(r.json()["access_token"])
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        yield AirflowApi("127.0.0.1", port, token, log_path, proc.pid, env)
    finally:
        stop_process_group(proc, timeout=30.0)
