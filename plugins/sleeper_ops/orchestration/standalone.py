"""``sleeper airflow`` / ``make airflow``: Airflow standalone wired to this Sleeper.

:func:`run_standalone` starts, in the foreground until Ctrl-C:

* the state store's PostgreSQL (the embedded one unless a DSN is configured), with a
  database ``airflow`` on the same server (created if missing) as Airflow's metadata
  database, reached with SQLAlchemy's psycopg 3 driver;
* ``airflow standalone`` (scheduler, DAG processor, triggerer, API server) listening on
  127.0.0.1 only, ``AIRFLOW_HOME`` from ``sleeper.toml``, the repository's ``dags/``,
  no example DAGs, the Sleeper plugin (REST API, status page) loaded, the ``spark``
  pool, the ``sleeper_spark`` connection (the configured Spark master) and the
  ``sleeper_default`` connection naming this home
  (:func:`~sleeper_ops.orchestration.connections.standalone_connection`; one you created
  yourself is kept), with the connection Test button enabled (``[core] test_connection``);
* if the catalog has no table yet, a small ``demo`` table so there are DAGs to see.

Every Airflow process gets ``SLEEPER_HOME`` and ``SLEEPER_STATE_STORE_DSN``, so DAG
parsing and tasks reach the same state store without starting a server of their own.
Once the API server answers and the DAG processor has loaded the Sleeper DAGs, it
prints the URL, the user ``admin`` and its password (from
``$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated``). Airflow's own output
goes to ``$AIRFLOW_HOME/standalone.log``. Ctrl-C (or SIGTERM) stops Airflow and its
task processes, then the embedded PostgreSQL.
"""

from __future__ import annotations

import importlib.resources
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError
from sleeper_ops.orchestration.connections import connection_command, standalone_connection
from sleeper_ops.orchestration.users import USERS_VARIABLE, other_users_line, parse_users, user_passwords
from sleeper_ops.orchestration.warm_imports import write_local_settings

AIRFLOW_DATABASE = "airflow"
DEFAULT_PORT = 8080
#: ``dags/`` of the checkout, shipped in the wheel as the package ``sleeper_ops.orchestration.dag_files``.
DAGS_FOLDER = Path(str(importlib.resources.files("sleeper_ops.orchestration.dag_files")))
SPARK_POOL_SLOTS = 1
STOP_TIMEOUT_SECONDS = 60.0

Say = Callable[[str], None]


def sqlalchemy_url(dsn: str, database: str) -> str:
    """A SQLAlchemy URL (psycopg 3 driver) for ``database`` on the server of libpq ``dsn``;
    a unix-socket host (a directory) goes in the query string."""
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL

    params = conninfo_to_dict(dsn)
    host = params.pop("host", None)
    query: dict[str, str] = {}
    if host and str(host).startswith("/"):
        query["host"] = str(host)
        host = None
    port = params.pop("port", None)
    for k in ("sslmode", "sslrootcert", "sslcert", "sslkey", "connect_timeout", "application_name"):
        if k in params:
            query[k] = str(params[k])
    user, password = params.get("user"), params.get("password")
    url = URL.create("postgresql+psycopg", username=str(user) if user else None,
                     password=str(password) if password else None,
                     host=str(host) if host else None, port=int(port) if port else None, database=database)
    # The query unencoded: Airflow's configuration would take a '%' for interpolation.
    return url.render_as_string(hide_password=False) + (
        "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def spark_connection(master: str) -> str:
    """The Airflow connection (JSON: a URI breaks on ``local[*]``'s brackets) for a master."""
    return json.dumps({"conn_type": "spark", "host": master})


def airflow_environment(config: SleeperConfig, *, state_dsn: str, metadata_url: str, port: int,
                        base: Optional[dict[str, str]] = None, users: Optional[str] = None) -> dict[str, str]:
    """The environment of every Airflow process :func:`run_standalone` starts; ``users``
    (as :func:`parse_users` returns it) sets SimpleAuthManager's users, else the
    environment's :data:`USERS_VARIABLE` (or Airflow's default, ``admin:admin``) stands."""
    env = dict(os.environ if base is None else base)
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env.update({
        "AIRFLOW_HOME": str(config.airflow_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(config.airflow_home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",  # the connection's Test button (default Disabled: 403)
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        # A task's supervisor reports to the API server, which shares this machine's cores
        # with Spark jobs and the tasks themselves: at Airflow's 5 s a loaded laptop (seen at
        # load 8 on 2 cores) times out and the supervisor kills a healthy task.
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
        # The scheduler's and triggerer's log servers bind every interface (Airflow has no
        # setting for their host) and answer only requests signed with this install's key;
        # free ports keep two installs on one machine apart.
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "SLEEPER_HOME": str(config.home),
        "SLEEPER_STATE_STORE_DSN": state_dsn,
        "AIRFLOW_CONN_SLEEPER_SPARK": spark_connection(config.spark_master),
    })
    if users is not None:
        env[USERS_VARIABLE] = users
    return env


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port free on this machine now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def ensure_demo_table(sleeper: Any, say: Say, rows: int = 100_000) -> None:
    """Create and fill a small ``demo`` table when the catalog has no tables."""
    if sleeper.tables():
        return
    from sleeper_ops.demo import DEMO_MARK, SYSTEM_TEST_SCHEMA, generate_rows, split_points
    from statestore.properties import CREATED_BY

    table = sleeper.create_table("demo", SYSTEM_TEST_SCHEMA, split_points=split_points(3),
                                 properties={CREATED_BY: DEMO_MARK})
    for seed in range(2):
        table.ingest(generate_rows(rows // 2, seed=seed))
    say(f"created table demo with {rows:,} records (the catalog was empty)")


@dataclass
class Ready:
    url: str
    user: str
    password: Optional[str]
    dags: int


#: Settings of :func:`airflow_environment` that are not Airflow configuration options.
_NOT_CONFIG = ("AIRFLOW_HOME",)


def write_airflow_cfg(airflow_home: Path, env: dict[str, str]) -> Path:
    """Write the Airflow settings of ``env`` (its ``AIRFLOW__SECTION__KEY`` variables) into
    ``airflow_home/airflow.cfg``, keeping the file's other settings, so the ``airflow``
    command run with ``AIRFLOW_HOME`` set to that folder (e.g. ``airflow backfill
    create``) reaches the same metadata database and DAG folder as ``sleeper airflow``.
    Returns the file's path."""
    import configparser

    path = airflow_home / "airflow.cfg"
    cfg = configparser.ConfigParser(interpolation=None)
    if path.exists():
        cfg.read(path)
    for name, value in sorted(env.items()):
        if not name.startswith("AIRFLOW__") or name in _NOT_CONFIG:
            continue
        section, _, key = name[len("AIRFLOW__"):].partition("__")
        if not key:
            continue
        section, key = section.lower(), key.lower()
        if not cfg.has_section(section):
            cfg.add_section(section)
        cfg.set(section, key, value.replace("%", "%%"))  # Airflow reads the file with % interpolation
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:  # it holds the DB URL
        f.write("# Written by 'sleeper airflow': its settings, for the airflow command with this AIRFLOW_HOME.\n")
        cfg.write(f)
    path.chmod(0o600)
    return path


def _admin_password(airflow_home: Path) -> Optional[str]:
    return user_passwords(airflow_home).get("admin")


def wait_until_ready(port: int, airflow_home: Path, *, alive: Callable[[], bool], timeout: float,
                     dag_prefix: str = "sleeper_") -> Ready:
    """Wait for the API server, a token for ``admin`` and at least one Sleeper DAG (or,
    with no tables, for the server alone). Raises ConfigError if Airflow exits first or
    ``timeout`` passes."""
    import httpx

    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    token = None
    dags = 0
    with httpx.Client(base_url=base, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if not alive():
                raise ConfigError(f"Airflow exited while starting; see {airflow_home / 'standalone.log'}")
            try:
                if client.get("/api/v2/monitor/health").status_code == 200:
                    password = _admin_password(airflow_home)
                    if password is not None and token is None:
                        r = client.post("/auth/token", json={"username": "admin", "password": password})
                        if r.status_code in (200, 201):
                            token = r.json()["access_token"]
                    if token is not None:
                        r = client.get("/api/v2/dags", params={"dag_id_pattern": dag_prefix, "limit": 1},
                                       headers={"Authorization": f"Bearer {token}"})
                        if r.status_code == 200:
                            dags = int(r.json().get("total_entries", 0))
                            if dags:
                                return Ready(base, "admin", password, dags)
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
    if token is not None:  # the server is up; the DAGs are merely slow to appear
        return Ready(base, "admin", _admin_password(airflow_home), dags)
    raise ConfigError(f"Airflow did not become ready on {base} within {timeout:.0f} s; "
                      f"see {airflow_home / 'standalone.log'}")


def airflow_batch(env: dict[str, str], *commands: list[str], log: Any, cwd: Optional[Path] = None) -> None:
    """Run ``airflow`` ``commands`` in order in one interpreter
    (:mod:`sleeper_ops.orchestration.cli_batch`); CalledProcessError when one fails."""
    subprocess.run([sys.executable, "-m", "sleeper_ops.orchestration.cli_batch", *(json.dumps(c) for c in commands)],
                   env=env, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=cwd)


def stop_process_group(proc: subprocess.Popen[Any], timeout: float = STOP_TIMEOUT_SECONDS) -> None:
    """Stop ``proc`` (started in a session of its own) and everything in its process group:
    SIGINT first (airflow standalone then stops its components), SIGTERM after ``timeout``,
    and finally SIGTERM then SIGKILL to stragglers of the group (task processes)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10.0)
            except subprocess.TimeoutExpired:
                pass
    if _signal_group(proc.pid, signal.SIGTERM):
        time.sleep(2.0)
        _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def run_standalone(home: Optional[os.PathLike[str] | str] = None, *, port: int = DEFAULT_PORT,
                   demo: bool = True, users: Optional[str] = None, ready_timeout: float = 300.0, say: Say = print,
                   on_ready: Optional[Callable[[Ready], None]] = None,
                   stop: Optional[Callable[[], bool]] = None) -> int:
    """Run Airflow standalone for the Sleeper at ``home`` until Ctrl-C (see the module
    docstring); returns Airflow's exit code (0 after Ctrl-C).

    ``users``: SimpleAuthManager's users, ``NAME:ROLE,...`` (:func:`parse_users`); every
    user's password is printed once Airflow is ready. ``on_ready`` is called once Airflow
    is ready; ``stop``, polled every second, ends the run when it returns True (tests)."""
    users = parse_users(users) if users is not None else None
    if not port_free(port):
        raise ConfigError(f"port {port} on 127.0.0.1 is in use; choose another with --port")
    if not DAGS_FOLDER.is_dir():
        raise ConfigError(f"the DAGs folder {DAGS_FOLDER} is missing (a broken install: reinstall the package)")
    config = SleeperConfig.load(home)
    if config.state_store_backend != "postgres":
        raise ConfigError("Airflow needs the PostgreSQL state store (state_store.backend = \"postgres\")")
    config.airflow_home.mkdir(parents=True, exist_ok=True)
    (config.airflow_home / "plugins").mkdir(exist_ok=True)
    write_local_settings(config.airflow_home)  # DAG parses and tasks fork with their imports made

    # Ctrl-C and SIGTERM end the run through KeyboardInterrupt, even when this process was
    # started with SIGINT ignored (e.g. in the background); children then get the default.
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, _raise_keyboard_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _run(config, port=port, demo=demo, users=users, ready_timeout=ready_timeout, say=say,
                    on_ready=on_ready, stop=stop)
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(config: SleeperConfig, *, port: int, demo: bool, users: Optional[str], ready_timeout: float, say: Say,
         on_ready: Optional[Callable[[Ready], None]], stop: Optional[Callable[[], bool]]) -> int:
    from sleeper_ops.api import Sleeper
    from statestore.postgres import create_database_if_missing

    log_path = config.airflow_home / "standalone.log"
    with Sleeper(config.home) as sleeper:  # starts the embedded PostgreSQL unless a DSN is configured
        state_dsn: str = sleeper.state_store.dsn  # type: ignore[attr-defined]
        create_database_if_missing(state_dsn, AIRFLOW_DATABASE)
        metadata_url = os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN") or sqlalchemy_url(
            state_dsn, AIRFLOW_DATABASE)
        if demo:
            ensure_demo_table(sleeper, say)
        env = airflow_environment(config, state_dsn=state_dsn, metadata_url=metadata_url, port=port, users=users)
        say(f"Airflow home {config.airflow_home}; metadata in database {AIRFLOW_DATABASE!r} of the state store's "
            f"PostgreSQL; log {log_path}")
        with open(log_path, "ab") as log:
            say("migrating the Airflow database ...")
            airflow_batch(env, ["db", "migrate"],
                          ["pools", "set", "spark", str(SPARK_POOL_SLOTS), "spark-submit runs of Sleeper DAGs"],
                          connection_command(standalone_connection(config), "sleeper airflow"), log=log)
            say(f"connection sleeper_default: the Sleeper of {config.home} (one you created is kept; the log says "
                "which)")
            # after Airflow's first command has generated airflow.cfg with its secrets (the JWT
            # secret every component must share), never before
            cfg = write_airflow_cfg(config.airflow_home, env)
            say(f"Airflow's settings are in {cfg}: AIRFLOW_HOME={config.airflow_home} airflow ... reaches "
                "this Airflow")
            say(f"starting Airflow standalone on http://127.0.0.1:{port} ...")
            proc = subprocess.Popen([str(Path(sys.executable).parent / "airflow"), "standalone"], env=env,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                ready = wait_until_ready(port, config.airflow_home, alive=lambda: proc.poll() is None,
                                         timeout=ready_timeout)
                say(f"Airflow is ready: {ready.url}  user {ready.user}  password {ready.password or '(unknown)'}")
                others = other_users_line(config.airflow_home, ready.user)
                if others:
                    say(others)
                say(f"{ready.dags} Sleeper DAGs loaded; table status page: {ready.url}/sleeper/ui/ ; "
                    f"REST API: {ready.url}/sleeper/api/v1 ; Ctrl-C stops")
                if on_ready is not None:
                    on_ready(ready)
                while proc.poll() is None:
                    if stop is not None and stop():
                        break
                    time.sleep(1.0)
            except KeyboardInterrupt:
                say("stopping Airflow ...")
            finally:
                stop_process_group(proc)
        code = proc.returncode
        say("Airflow stopped" + ("" if code in (0, -signal.SIGINT, -signal.SIGTERM, None) else f" (exit {code})"))
    return 0 if code in (0, -signal.SIGINT, -signal.SIGTERM, None) else int(code)


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
