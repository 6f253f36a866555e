"""Start and stop the scaled-out shape on one machine (``sleeper cluster``).

:func:`running_cluster` starts, as separate processes, each in a folder of its own
under ``work`` (its working directory, ``HOME`` and, for Airflow, ``AIRFLOW_HOME``):

1. Redis (Debian's ``redis-server``): the Celery broker and result backend;
2. one moto server serving S3 (bucket :data:`~sleeper_ops.cluster.environment.BUCKET`)
   and DynamoDB (:mod:`sleeper_ops.cluster.moto_server`);
3. the embedded PostgreSQL: Airflow's metadata database and, with
   ``state_store="postgres"``, the state store, both created empty at each start (moto
   keeps nothing, so state left from a former run would name lost files);
4. Airflow with the CeleryExecutor: the scheduler, the DAG processor, the triggerer,
   the API server and two Celery workers, each given its environment by
   :func:`~sleeper_ops.cluster.environment.process_environment` and nothing of the
   caller's Sleeper or Airflow settings;
5. unless ``spark=False``, the standing Spark cluster (:mod:`sleeper_ops.spark.cluster`):
   a master, two workers and the Sleeper Spark service.

Spark starts while Airflow boots. The cluster is ready when the API server hands out a
token, the scheduler, DAG processor and triggerer report healthy and both Celery
workers say they are ready. It also writes ``work/client/sleeper.toml``: a Sleeper home
that reaches the same stores (for the CLI and the API server's Sleeper plugin).

When the ``with`` block ends, however it ends, everything is stopped in the reverse
order (Spark, then Airflow's processes together, then moto and Redis), each process by
its process group (:func:`~sleeper_ops.cluster.processes.stop_groups`), and the embedded
PostgreSQL last.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import sys
import time
from base64 import urlsafe_b64encode
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import tomli_w

from sleeper_ops.cluster import environment as envs
from sleeper_ops.cluster.event_queue import create_event_queue
from sleeper_ops.cluster.processes import (
    clean_environment,
    kill_group,
    restart_process,
    start_process,
    stop_groups,
    wait_for_log,
    wait_until,
)
from sleeper_ops.errors import ConfigError
from sleeper_ops.orchestration.standalone import (
    DAGS_FOLDER,
    airflow_batch,
    sqlalchemy_url,
)
from sleeper_ops.orchestration.users import user_passwords
from sleeper_ops.orchestration.warm_imports import write_local_settings
from sleeper_ops.spark.cluster import Piece, StandingCluster, free_port, standing_cluster

HOST = "127.0.0.1"
AWS_REGION = "us-east-1"
#: moto accepts any keys
AWS_KEYS = ("sleeper", "sleeper-secret")
FILE_PROCESS_INTERVAL = 10


@dataclass
class RunningCluster:
    """The running shape: its layout, every process, Airflow's admin password."""

    layout: envs.ClusterLayout
    work: Path
    pieces: list[Piece] = field(default_factory=list)
    spark: Optional[StandingCluster] = None
    admin_password: Optional[str] = None
    started_seconds: float = 0.0
    #: the SQS queue the bucket's ObjectCreated events under ``incoming/`` go to
    #: (:mod:`sleeper_ops.cluster.event_queue`)
    events_queue: Optional[str] = None
    #: processes that did not stop on SIGTERM within the grace period and were killed
    killed: list[str] = field(default_factory=list)

    @property
    def client_home(self) -> Path:
        return Path(self.layout.client_home)

    def describe(self) -> list[str]:
        """One line per process: name, where it answers, process id and log."""
        return [f"{p.name:<22} {p.url:<30} pid {p.process.pid:<8} log {p.log}" for p in self._every()]

    def piece(self, name: str) -> Piece:
        """The process called ``name`` (as :meth:`describe` names it, e.g. ``airflow
        scheduler``, ``airflow worker-1``, ``worker 1`` of Spark); ConfigError if none."""
        for p in self._every():
            if p.name == name:
                return p
        raise ConfigError(f"the cluster has no process {name!r}: it has {', '.join(p.name for p in self._every())}")

    def kill(self, name: str) -> Piece:
        """SIGKILL the process group of ``name`` (a crash of that process and of all it
        forked); the piece killed. It stays dead until :meth:`restart`."""
        piece = self.piece(name)
        kill_group(piece)
        return piece

    def restart(self, name: str, *, kill: bool = False) -> Piece:
        """Stop ``name`` (SIGTERM, then SIGKILL after the grace; at once with ``kill``)
        and start it again as it was started, in its place in the cluster (so stopping the
        cluster stops the new process); the new piece."""
        for pieces in (self.pieces, self.spark.pieces if self.spark is not None else []):
            for i, p in enumerate(pieces):
                if p.name == name:
                    pieces[i] = restart_process(p, kill=kill)
                    return pieces[i]
        raise ConfigError(f"the cluster has no process {name!r}: it has {', '.join(p.name for p in self._every())}")

    def _every(self) -> list[Piece]:
        """Every process: Airflow's and the services', then Spark's."""
        return self.pieces + (self.spark.pieces if self.spark is not None else [])

    def dead(self) -> Optional[str]:
        """``the <name> exited with code N (see <log>)`` for the first process gone, else None."""
        for p in self._every():
            if p.process.poll() is not None:
                return f"the {p.name} exited with code {p.process.returncode} (see {p.log})"
        return None


def _secret() -> str:
    return secrets.token_urlsafe(64)  # 86 characters: above the 64 bytes SHA-512 HMAC wants


def _layout(work: Path, state_store: str, *, api_port: int, redis_port: int, moto_port: int, pg_dsn: str,
            spark: bool, task_heartbeat_timeout: Optional[int] = None) -> envs.ClusterLayout:
    from psycopg.conninfo import conninfo_to_dict

    postgres = None
    if state_store == "postgres":
        params = conninfo_to_dict(pg_dsn)
        postgres = envs.PostgresAddress(host=str(params.get("host") or HOST),
                                        port=int(str(params["port"])) if params.get("port") else None,
                                        login=str(params.get("user") or "postgres"),
                                        password=str(params.get("password") or ""))
    homes = {role: str(work / role) for role in envs.ROLES}
    return envs.ClusterLayout(
        state_store=state_store, api_host=HOST, api_port=api_port,
        broker_url=f"redis://{HOST}:{redis_port}/0", result_backend=f"redis://{HOST}:{redis_port}/1",
        metadata_url=sqlalchemy_url(pg_dsn, "airflow"), aws_endpoint=f"http://{HOST}:{moto_port}",
        aws_region=AWS_REGION, aws_access_key=AWS_KEYS[0], aws_secret_key=AWS_KEYS[1],
        dags_folder=str(DAGS_FOLDER), jwt_secret=_secret(), api_secret_key=_secret(),
        fernet_key=urlsafe_b64encode(secrets.token_bytes(32)).decode(), client_home=str(work / "client"),
        spark_master=f"spark://{HOST}:{free_port(HOST)}" if spark else "local[2]",
        spark_service=f"http://{HOST}:{free_port(HOST)}" if spark else None, postgres=postgres, homes=homes,
        log_ports={role: (free_port(HOST), free_port(HOST)) for role in envs.ROLES},
        file_process_interval=FILE_PROCESS_INTERVAL, task_heartbeat_timeout=task_heartbeat_timeout)


def redis_server() -> str:
    """The ``redis-server`` executable; ConfigError saying how to install it when missing."""
    found = shutil.which("redis-server")
    if not found:
        raise ConfigError("redis-server is not installed (make redis, or apt-get install redis-server)")
    return found


@contextlib.contextmanager
def running_cluster(work: Path, *, state_store: str = "dynamodb", api_port: int = 8080, spark: bool = True,
                    spark_memory: str = "1g", timeout: float = 300.0,
                    task_heartbeat_timeout: Optional[int] = None) -> Iterator[RunningCluster]:
    """Start the shape (see the module docstring); yield it running; stop it all.
    ``task_heartbeat_timeout``: seconds after which the scheduler fails a task whose
    worker stopped heartbeating (default Airflow's 300)."""
    from statestore.postgres.embedded import EmbeddedPostgres

    if state_store not in envs.STATE_STORES:
        raise ConfigError(f"--state-store must be one of {', '.join(envs.STATE_STORES)}, got {state_store!r}")
    started = time.monotonic()
    deadline = started + timeout
    work = Path(work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    base = clean_environment()
    pg = EmbeddedPostgres(work / "pg", database="postgres", cleanup_mode="stop")
    airflow_pieces: list[Piece] = []
    with contextlib.ExitStack() as stack:
        stack.callback(pg.stop)
        pg.start()
        for database in ("airflow", "sleeper"):  # moto keeps nothing: neither may the databases
            _fresh_database(pg.admin_dsn, database)
        layout = _layout(work, state_store, api_port=api_port, redis_port=free_port(HOST), moto_port=free_port(HOST),
                         pg_dsn=pg.dsn_for("sleeper"), spark=spark, task_heartbeat_timeout=task_heartbeat_timeout)
        cluster = RunningCluster(layout, work)
        stack.callback(_stop_pieces, cluster)
        redis_port = layout.broker_url.rsplit(":", 1)[1].split("/")[0]
        redis = start_process("redis", layout.broker_url, [
            redis_server(), "--port", redis_port, "--bind", HOST, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", str(work / "redis")], log=work / "redis.log", env=base, cwd=work / "redis")
        cluster.pieces.append(redis)
        moto_port = layout.aws_endpoint.rsplit(":", 1)[1]
        moto = start_process("moto (S3+DDB)", layout.aws_endpoint, [
            sys.executable, "-m", "sleeper_ops.cluster.moto_server", "--host", HOST, "--port", moto_port,
            "--bucket", layout.bucket], log=work / "moto.log", env=base, cwd=work / "moto")
        cluster.pieces.append(moto)
        _write_client_home(layout)
        for home in layout.homes.values():
            Path(home).mkdir(parents=True, exist_ok=True)
            write_local_settings(Path(home))  # DAG parses and tasks fork with their imports made
        init_env = {**base, **envs.process_environment(layout, "scheduler")}
        with open(work / "airflow-init.log", "wb") as log:  # one interpreter for the three commands
            airflow_batch(init_env, *envs.init_commands(layout), log=log, cwd=Path(layout.homes["scheduler"]))
        for role in envs.ROLES:
            env = {**base, **envs.process_environment(layout, role)}
            url = layout.api_url if role == "api-server" else layout.broker_url if role in envs.WORKER_ROLES else ""
            piece = start_process(f"airflow {role}", url, ["airflow", *envs.role_command(role, layout)],
                                  log=work / f"{role}.log", env=env, cwd=Path(layout.homes[role]))
            cluster.pieces.append(piece)
            airflow_pieces.append(piece)
        wait_for_log(redis, r"Ready to accept connections", deadline)
        wait_for_log(moto, r"moto server at http", deadline)
        cluster.events_queue = create_event_queue(layout.aws_endpoint, layout.bucket, access_key=AWS_KEYS[0],
                                                  secret_key=AWS_KEYS[1], region=AWS_REGION)
        if spark:
            spark_cluster = stack.enter_context(standing_cluster(
                work / "spark", workers=2, cores=1, memory=spark_memory, master_port=int(layout.spark_master
                                                                                            .rsplit(":", 1)[1]),
                service_port=int(str(layout.spark_service).rsplit(":", 1)[1]), host=HOST,
                timeout=max(1.0, deadline - time.monotonic()), base_env=base))
            cluster.spark = spark_cluster
        for piece in airflow_pieces:
            if "worker" in piece.name:
                wait_for_log(piece, r"worker-\d@\S+ ready", deadline)
        cluster.admin_password = _wait_for_airflow(layout, deadline, cluster.dead)
        cluster.started_seconds = time.monotonic() - started
        yield cluster


def _fresh_database(admin_dsn: str, database: str) -> None:
    """Drop ``database`` if a former run left it, and create it empty."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def _stop_pieces(cluster: RunningCluster) -> None:
    """Airflow's processes together, then moto and Redis (which they use until they stop)."""
    airflow = [p for p in cluster.pieces if p.name.startswith("airflow")]
    cluster.killed += stop_groups(airflow)
    cluster.killed += stop_groups([p for p in cluster.pieces if p not in airflow])


def _write_client_home(layout: envs.ClusterLayout) -> None:
    home = Path(layout.client_home)
    home.mkdir(parents=True, exist_ok=True)
    path = home / "sleeper.toml"
    path.write_text(tomli_w.dumps(envs.client_config(layout)))
    path.chmod(0o600)


def _wait_for_airflow(layout: envs.ClusterLayout, deadline: float, dead: Any) -> str:
    """Wait for the API server to hand ``admin`` a token and for the scheduler, DAG
    processor and triggerer to report healthy; the admin password."""
    import httpx

    api_home = Path(layout.homes["api-server"])
    found: dict[str, str] = {}

    def ready() -> bool:
        try:
            with httpx.Client(base_url=layout.api_url, timeout=5.0) as client:
                health = client.get("/api/v2/monitor/health")
                if health.status_code != 200:
                    return False
                doc = health.json()
                if any((doc.get(k) or {}).get("status") != "healthy"
                       for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    return False
                password = user_passwords(api_home).get("admin")
                if password is None:
                    return False
                r = client.post("/auth/token", json={"username": "admin", "password": password})
                if r.status_code not in (200, 201):
                    return False
                found["password"] = password
                return True
        except httpx.HTTPError:
            return False
    wait_until(ready, f"Airflow on {layout.api_url}", deadline, dead)
    return found["password"]
