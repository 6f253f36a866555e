"""The environment of every Airflow process of the scaled-out shape: the one source of
truth for ``sleeper cluster`` (which starts them on this machine) and for
``docker-compose.yaml`` (a unit test checks the file against :func:`process_environment`
and :data:`ROLES`, so the two cannot drift).

Roles and what each is given (besides ``AIRFLOW_HOME`` and ``HOME``, its own folder):

* every role: the CeleryExecutor with Redis as broker and result backend, the DAG folder
  (the only path the processes share), the Execution API's URL, the secrets every
  component must share (JWT, API secret key, Fernet key) and the connections
  ``sleeper_default`` (state store, object store, Spark service), ``aws_default``
  (region, endpoint, keys of S3 and DynamoDB) and ``sleeper_spark`` (the Spark master),
  each as an ``AIRFLOW_CONN_*`` variable in Airflow's JSON form (``sleeper cluster`` also
  writes ``sleeper_default`` into the metadata database, :func:`connection_init_command`,
  so the UI lists it and the REST API reads it; the variable, read first, holds the same
  fields); the connection test enabled (``[core] test_connection``, the connection's
  Test button and ``POST /api/v2/connections/test``); task logs written to
  the bucket (``s3://<bucket>/airflow-logs``, Airflow's remote logging through
  ``aws_default``), so the API server shows the log of a task that ran on any worker
  (the processes share no log folder, and on one machine each worker serves its logs on
  a port of its own, which the API server cannot know);
* the control plane (scheduler, DAG processor, triggerer, API server): the metadata
  database;
* the API server: its address and ``SLEEPER_HOME`` for the Sleeper plugin (a home holding
  only a ``sleeper.toml`` that names the same remote stores);
* the Celery workers: no metadata database and no ``SLEEPER_HOME``; they find the table
  catalog and every store through the connections.

Pure: no process is started and nothing is read here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

CONTROL_ROLES = ("scheduler", "dag-processor", "triggerer", "api-server")
#: where in the bucket the task logs go (Airflow's remote logging)
LOG_PREFIX = "airflow-logs"
WORKER_ROLES = ("worker-1", "worker-2")
ROLES = CONTROL_ROLES + WORKER_ROLES
EXECUTOR = "CeleryExecutor"
STATE_STORES = ("dynamodb", "postgres")
SLEEPER_CONN = "AIRFLOW_CONN_SLEEPER_DEFAULT"
AWS_CONN = "AIRFLOW_CONN_AWS_DEFAULT"
SPARK_CONN = "AIRFLOW_CONN_SLEEPER_SPARK"
#: the bucket holding table data (``data/``) and the DynamoDB state store's snapshots
BUCKET = "sleeper-data"
DYNAMODB_TABLE_PREFIX = "sleeper-"
WORKER_CONCURRENCY = 2
#: seconds a task may stay queued (sent to Celery, not started) before the scheduler revokes
#: it and queues it again (twice, then fails it). A worker killed just after it took a task's
#: message holds it unacknowledged, and Redis hands it out again only after the broker's
#: visibility timeout (a day, Airflow's default): with Airflow's 600 s here, such a task
#: waited 10 minutes (tests/system/test_cluster.py saw a bulk import sit queued 380 s).
#: A task waiting for a free worker slot that long is queued again too, which is harmless.
TASK_QUEUED_TIMEOUT_SECONDS = 180


@dataclass(frozen=True)
class PostgresAddress:
    """Where the PostgreSQL state store is: host (a name, an address or a unix socket
    directory), port, user, password and database."""

    host: str
    port: Optional[int]
    login: str
    password: str
    database: str = "sleeper"


@dataclass(frozen=True)
class ClusterLayout:
    """Where each shared service of the shape answers, and the shared secrets.

    ``homes``: each role's own folder (its ``AIRFLOW_HOME``, ``HOME`` and working
    directory); ``log_ports``: each role's (worker, trigger) log server ports, distinct
    per role on one machine (absent: Airflow's defaults, as in containers)."""

    state_store: str
    api_host: str
    api_port: int
    broker_url: str
    result_backend: str
    metadata_url: str
    aws_endpoint: str
    aws_region: str
    aws_access_key: str
    aws_secret_key: str
    dags_folder: str
    jwt_secret: str
    api_secret_key: str
    fernet_key: str
    client_home: str
    spark_master: str
    spark_service: Optional[str] = None
    postgres: Optional[PostgresAddress] = None
    homes: Mapping[str, str] = field(default_factory=dict)
    log_ports: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    bucket: str = BUCKET
    file_process_interval: int = 30
    #: the address the API server binds (default ``api_host``) and the URL users open
    #: (default :attr:`api_url`): differ in containers
    api_bind: Optional[str] = None
    public_url: Optional[str] = None
    #: seconds without a heartbeat after which the scheduler fails a running task (its
    #: worker is taken as dead); None: Airflow's default (300)
    task_heartbeat_timeout: Optional[int] = None

    @property
    def api_url(self) -> str:
        """Where the other processes reach the API server (and its Execution API)."""
        return f"http://{self.api_host}:{self.api_port}"


def sleeper_connection(layout: ClusterLayout) -> dict[str, Any]:
    """The ``sleeper_default`` connection: the state store, ``s3://<bucket>/data`` through
    ``aws_default`` and the Spark master and service."""
    extra: dict[str, Any] = {"state_store": layout.state_store, "object_store_uri": f"s3://{layout.bucket}/data",
                             "aws_conn_id": "aws_default", "spark_master": layout.spark_master}
    if layout.spark_service:
        extra["spark_service"] = layout.spark_service
    conn: dict[str, Any] = {"conn_type": "sleeper"}
    if layout.state_store == "dynamodb":
        extra["dynamodb_table_prefix"] = DYNAMODB_TABLE_PREFIX
    else:
        pg = layout.postgres
        if pg is None:
            raise ValueError("the postgres state store needs the layout's postgres address")
        conn.update(host=pg.host, login=pg.login, password=pg.password, schema=pg.database)
        if pg.port:
            conn["port"] = pg.port
    conn["extra"] = extra
    return conn


def connection_init_command(layout: ClusterLayout, writer: str = "sleeper cluster") -> list[str]:
    """The cli_batch command writing :func:`sleeper_connection` as ``sleeper_default`` into
    the metadata database (:mod:`sleeper_ops.orchestration.connections`); ``writer`` goes in
    its description."""
    from sleeper_ops.orchestration.connections import connection_command

    return connection_command(sleeper_connection(layout), writer)


def init_commands(layout: ClusterLayout, writer: str = "sleeper cluster") -> list[list[str]]:
    """What prepares the metadata database before any Airflow process starts, in one
    interpreter (:mod:`sleeper_ops.orchestration.cli_batch`): migrate it, create the
    ``spark`` pool, write ``sleeper_default`` (:func:`connection_init_command`).
    ``sleeper cluster`` runs these, and docker-compose.yaml's ``airflow-init`` service the
    same (a test keeps the two equal)."""
    from sleeper_ops.orchestration.standalone import SPARK_POOL_SLOTS

    return [["db", "migrate"], ["pools", "set", "spark", str(SPARK_POOL_SLOTS), "Spark jobs"],
            connection_init_command(layout, writer)]


def aws_connection(layout: ClusterLayout) -> dict[str, Any]:
    """The ``aws_default`` connection: keys as login and password, region and endpoint."""
    return {"conn_type": "aws", "login": layout.aws_access_key, "password": layout.aws_secret_key,
            "extra": {"region_name": layout.aws_region, "endpoint_url": layout.aws_endpoint}}


def process_environment(layout: ClusterLayout, role: str) -> dict[str, str]:
    """The variables ``role`` is started with (on top of a clean base environment: see
    the module docstring for what each role gets and why)."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")
    if layout.state_store not in STATE_STORES:
        raise ValueError(f"unknown state store {layout.state_store!r}: expected one of {', '.join(STATE_STORES)}")
    env = {
        "AIRFLOW__CORE__EXECUTOR": EXECUTOR,
        "AIRFLOW__CELERY__BROKER_URL": layout.broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": layout.result_backend,
        "AIRFLOW__CORE__DAGS_FOLDER": layout.dags_folder,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{layout.api_url}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": layout.jwt_secret,
        "AIRFLOW__API__SECRET_KEY": layout.api_secret_key,
        "AIRFLOW__CORE__FERNET_KEY": layout.fernet_key,
        "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
        SLEEPER_CONN: json.dumps(sleeper_connection(layout)),
        AWS_CONN: json.dumps(aws_connection(layout)),
        SPARK_CONN: json.dumps({"conn_type": "spark", "host": layout.spark_master}),
        "AIRFLOW__LOGGING__REMOTE_LOGGING": "True",
        "AIRFLOW__LOGGING__REMOTE_BASE_LOG_FOLDER": f"s3://{layout.bucket}/{LOG_PREFIX}",
        "AIRFLOW__LOGGING__REMOTE_LOG_CONN_ID": "aws_default",
    }
    home = layout.homes.get(role)
    if home is not None:
        env.update(AIRFLOW_HOME=home, HOME=home)
    ports = layout.log_ports.get(role)
    if ports is not None:
        env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(ports[0])
        env["AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT"] = str(ports[1])
    if role in CONTROL_ROLES:
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = layout.metadata_url
    if role == "api-server":
        env.update({"AIRFLOW__API__HOST": layout.api_bind or layout.api_host,
                    "AIRFLOW__API__PORT": str(layout.api_port),
                    "AIRFLOW__API__BASE_URL": layout.public_url or layout.api_url,
                    "SLEEPER_HOME": layout.client_home})
    elif role == "scheduler":
        env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT"] = str(TASK_QUEUED_TIMEOUT_SECONDS)
        env["AIRFLOW__SCHEDULER__TASK_QUEUED_TIMEOUT_CHECK_INTERVAL"] = "30"
        if layout.task_heartbeat_timeout is not None:
            env["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT"] = str(layout.task_heartbeat_timeout)
            env["AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL"] = "2"
    elif role == "dag-processor":
        env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = str(layout.file_process_interval)
        env["AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL"] = str(layout.file_process_interval)
    elif role in WORKER_ROLES:
        env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] = str(WORKER_CONCURRENCY)
    return env


def role_command(role: str, layout: ClusterLayout) -> list[str]:
    """The ``airflow`` arguments that run ``role`` (a worker names itself after its role)."""
    if role in WORKER_ROLES:
        return ["celery", "worker", "--celery-hostname", f"{role}@%h", "--concurrency", str(WORKER_CONCURRENCY)]
    if role == "api-server":
        return ["api-server", "--host", layout.api_bind or layout.api_host, "--port", str(layout.api_port)]
    if role in ROLES:
        return [role]
    raise ValueError(f"unknown role {role!r}: expected one of {', '.join(ROLES)}")


def client_config(layout: ClusterLayout) -> dict[str, Any]:
    """The ``sleeper.toml`` sections of a home that reaches the cluster's stores (the CLI's
    and the API server's): ``s3://<bucket>/data``, the state store, the Spark service."""
    s3 = {"endpoint_override": layout.aws_endpoint.split("://", 1)[-1],
          "scheme": layout.aws_endpoint.split("://", 1)[0], "region": layout.aws_region,
          "access_key": layout.aws_access_key, "secret_key": layout.aws_secret_key}
    if layout.state_store == "dynamodb":
        state: dict[str, Any] = {"backend": "dynamodb", "endpoint_url": layout.aws_endpoint,
                                 "region": layout.aws_region, "table_prefix": DYNAMODB_TABLE_PREFIX,
                                 "access_key": layout.aws_access_key, "secret_key": layout.aws_secret_key}
    else:
        from sleeper_ops.airflow.hooks.connection import postgres_dsn

        pg = layout.postgres
        if pg is None:
            raise ValueError("the postgres state store needs the layout's postgres address")
        state = {"backend": "postgres", "dsn": postgres_dsn(pg.host, pg.port, pg.login, pg.password, pg.database)}
    spark: dict[str, Any] = {"master": layout.spark_master}
    if layout.spark_service:
        spark["service"] = layout.spark_service
    return {"object_store": {"uri": f"s3://{layout.bucket}/data", **s3}, "state_store": state, "spark": spark}


#: the docker-compose.yaml service of each role
COMPOSE_SERVICES = {"scheduler": "airflow-scheduler", "dag-processor": "airflow-dag-processor",
                    "triggerer": "airflow-triggerer", "api-server": "airflow-apiserver",
                    "worker-1": "airflow-worker-1", "worker-2": "airflow-worker-2"}
#: the other services of docker-compose.yaml, each the counterpart of a process of ``sleeper cluster``
COMPOSE_SUPPORT_SERVICES = ("postgres", "redis", "moto", "spark-master", "spark-worker-1", "spark-worker-2",
                            "spark-service", "airflow-init")
#: placeholders for a laptop, as docker-compose.yaml carries them (change them before anything else)
COMPOSE_SECRETS = {"jwt_secret": "change-me-jwt-secret-of-at-least-thirty-two-bytes",
                   "api_secret_key": "change-me-api-secret-key",
                   "fernet_key": "Y2hhbmdlLW1lLWZlcm5ldC1rZXktb2YtMzItYnl0ZXM="}


def compose_layout() -> ClusterLayout:
    """The layout docker-compose.yaml describes: each service under its compose name, the
    API server published on 127.0.0.1:8080, the placeholder secrets."""
    return ClusterLayout(
        state_store="dynamodb", api_host="airflow-apiserver", api_port=8080, api_bind="0.0.0.0",
        public_url="http://127.0.0.1:8080", broker_url="redis://redis:6379/0", result_backend="redis://redis:6379/1",
        metadata_url="postgresql+psycopg://sleeper:sleeper@postgres:5432/airflow", aws_endpoint="http://moto:5000",
        aws_region="us-east-1", aws_access_key="sleeper", aws_secret_key="sleeper-secret",
        dags_folder="/opt/sleeper-airflow/dags", client_home="/opt/sleeper", spark_master="spark://spark-master:7077",
        spark_service="http://spark-service:8998", homes=dict.fromkeys(ROLES, "/opt/airflow"),
        log_ports=dict.fromkeys(ROLES, (8793, 8794)), file_process_interval=30,
        jwt_secret=COMPOSE_SECRETS["jwt_secret"], api_secret_key=COMPOSE_SECRETS["api_secret_key"],
        fernet_key=COMPOSE_SECRETS["fernet_key"])
