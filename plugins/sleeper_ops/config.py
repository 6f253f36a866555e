"""Configuration: ``SLEEPER_HOME/sleeper.toml``.

The first command that needs it writes a default file naming: the object store
(default ``SLEEPER_HOME/data``; or ``s3://bucket/prefix`` with an optional endpoint),
the state store (default the embedded PostgreSQL under ``SLEEPER_HOME/pg``; a DSN
replaces it; or ``backend = "dynamodb"``, see :class:`DynamoDBSettings`), the Spark
master (``local[*]``) and the Airflow home. Relative paths are relative to ``SLEEPER_HOME``.
Scaling out is a change here, not in code.

An optional ``[ingest]`` section sets ``allowed_prefixes``: the only places the REST
API may be asked to ingest files from (a list of local directories, absolute or
relative to ``SLEEPER_HOME``, and ``s3://bucket/prefix`` URIs). Without it they are
the object store's ``ingest`` folder and ``SLEEPER_HOME/ingest``, never the tables'
own data; see :mod:`sleeper_ops.web.rest_paths`.

An optional ``[iterators]`` section sets ``python_modules``: the only modules (each
with its submodules) that a table's ``sleeper.table.iterator.python`` may name. Without
it none may: any table writer can set a table property, and a Python iterator imports
its module on every worker that reads or compacts the table. The built-in age-off and
aggregation iterators need no module. See :mod:`sleeper_ops.engine.user_iterators`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from sleeper_ops.engine.user_iterators import python_modules_setting
from sleeper_ops.errors import ConfigError
from sleeper_ops.io.storage import S3Options
from statestore.backends import backend_names

DEFAULT_HOME = ".sleeper"
#: how long the embedded PostgreSQL stays up with no client, by default
DEFAULT_IDLE_MINUTES = 30.0
IDLE_MINUTES_ENV = "SLEEPER_PG_IDLE_MINUTES"


def default_store_ingest_prefix(object_store: str) -> str:
    """The object store's folder for files to ingest (the default allowed REST ingest
    prefix there): ``<object store>/ingest``. Table data is under ``<store>/<table id>/``."""
    return f"{object_store.rstrip('/')}/ingest"

DEFAULT_CONFIG: dict[str, Any] = {
    "object_store": {"uri": "data"},
    "state_store": {"backend": "postgres", "dsn": "", "embedded_dir": "pg"},
    "spark": {"master": "local[*]"},
    "airflow": {"home": "airflow"},
}


#: the ``[state_store]`` keys of the DynamoDB backend (besides ``backend``)
DYNAMODB_KEYS = ("region", "endpoint_url", "table_prefix", "access_key", "secret_key", "object_store")


@dataclass(frozen=True)
class DynamoDBSettings:
    """``[state_store]`` with ``backend = "dynamodb"``: the DynamoDB region, endpoint
    (e.g. a local emulator; empty: AWS), table name prefix and credentials (empty:
    boto3's usual chain), and ``object_store``: where snapshots and large transactions
    go (``s3://bucket/prefix`` or a local directory, relative to ``SLEEPER_HOME``; by
    default ``_statestore`` under the object store). S3 is reached with the
    ``[object_store]`` endpoint and keys. ``group_commit`` (default true): while other
    committers commit to a table, commits go through pending requests that one
    committer logs in a batch (no lost races; alone, a commit is a single one;
    :mod:`statestore.dynamodb.group_commit`, docs/adr/0010); false: every commit races
    for the next log number itself."""

    region: str = "us-east-1"
    endpoint_url: Optional[str] = None
    table_prefix: str = "sleeper-"
    access_key: Optional[str] = None
    secret_key: Optional[str] = None
    object_store: Optional[str] = None
    group_commit: bool = True

    @classmethod
    def from_section(cls, home: Path, ss: dict[str, Any]) -> DynamoDBSettings:
        bad = [k for k in DYNAMODB_KEYS if k in ss and not isinstance(ss[k], str)]
        if bad:
            raise ConfigError(f"state_store.{bad[0]} must be a string, got {ss[bad[0]]!r}")
        if not isinstance(ss.get("group_commit", True), bool):
            raise ConfigError(f"state_store.group_commit must be true or false, got {ss['group_commit']!r}")
        store = ss.get("object_store") or None
        if store is not None and not store.startswith("s3://"):
            store = str(_under(home, store))
        return cls(region=ss.get("region") or "us-east-1", endpoint_url=ss.get("endpoint_url") or None,
                   table_prefix=ss.get("table_prefix", "sleeper-"), access_key=ss.get("access_key") or None,
                   secret_key=ss.get("secret_key") or None, object_store=store,
                   group_commit=ss.get("group_commit", True))


def default_home() -> Path:
    return Path(os.environ.get("SLEEPER_HOME", DEFAULT_HOME))


@dataclass(frozen=True)
class SleeperConfig:
    home: Path
    object_store_uri: str
    s3: Optional[S3Options]
    state_store_backend: str
    state_store_dsn: Optional[str]
    embedded_pg_dir: Path
    spark_master: str
    airflow_home: Path
    #: ``ingest.allowed_prefixes`` as configured (local ones absolute); None: the default,
    #: see :meth:`ingest_prefixes`
    ingest_allowed_prefixes: Optional[tuple[str, ...]] = None
    #: the DynamoDB backend's settings (used when ``state_store_backend == "dynamodb"``)
    dynamodb: DynamoDBSettings = DynamoDBSettings()
    #: ``state_store.idle_minutes``: the embedded PostgreSQL outlives a command and stops
    #: after this long with no client (0: it stops with the last process using it);
    #: ``SLEEPER_PG_IDLE_MINUTES`` overrides it
    idle_minutes: float = DEFAULT_IDLE_MINUTES
    #: ``spark.service``: the URL of a standing Spark driver service
    #: (:mod:`sleeper_ops.spark.service`, e.g. ``http://127.0.0.1:8998``); when set, bulk
    #: imports and Spark compaction batches run there instead of in a spark-submit each
    spark_service: Optional[str] = None
    #: ``iterators.python_modules``: the modules (and their submodules) Python iterators
    #: may come from; empty: none (:mod:`sleeper_ops.engine.user_iterators`)
    python_iterator_modules: tuple[str, ...] = ()

    def ingest_prefixes(self) -> tuple[str, ...]:
        """Where the REST API may be asked to ingest files from: ``ingest.allowed_prefixes``,
        by default the object store's ``ingest`` folder and ``SLEEPER_HOME/ingest`` (not
        the whole object store: it holds every table's data files)."""
        if self.ingest_allowed_prefixes is not None:
            return self.ingest_allowed_prefixes
        return (default_store_ingest_prefix(self.object_store_uri), str(self.home / "ingest"))

    def state_store_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`statestore.backends.open_state_store` for this
        configuration's backend (PostgreSQL: the DSN, or where the embedded server lives;
        DynamoDB: :class:`DynamoDBSettings`, the object store for its snapshots defaulting
        to ``_statestore`` under this configuration's object store)."""
        if self.state_store_backend == "postgres":
            return {"dsn": self.state_store_dsn, "embedded_dir": self.embedded_pg_dir,
                    "idle_minutes": self.idle_minutes}
        if self.state_store_backend == "dynamodb":
            d = self.dynamodb
            where = d.object_store or f"{self.object_store_uri.rstrip('/')}/_statestore"
            out: dict[str, Any] = {"region": d.region, "endpoint_url": d.endpoint_url, "table_prefix": d.table_prefix,
                                   "access_key": d.access_key, "secret_key": d.secret_key, "object_store": where,
                                   "group_commit": d.group_commit}
            if where.startswith("s3://") and self.s3 is not None:
                out["object_store_options"] = {"endpoint_url": self.s3.endpoint_url, "region": self.s3.region,
                                               "access_key": self.s3.access_key, "secret_key": self.s3.secret_key}
            return out
        return {}

    def to_dict(self) -> dict[str, Any]:
        """This configuration as the sections of a ``sleeper.toml`` (``object_store``,
        ``state_store``, ``spark``, ``airflow``, and ``ingest`` when its allowed prefixes
        are set), every setting written out.

        ``SleeperConfig.from_dict(self.home, self.to_dict())`` equals ``self`` (unless
        ``SLEEPER_STATE_STORE_DSN``, which :meth:`from_dict` applies, has changed since).
        Paths under ``home`` are written relative to it, others absolute. Unset
        options are left out (TOML has no null; an empty DSN means none). The DSN and S3
        keys are written in clear: keep the file private.
        """

        def under_home(p: Path | str) -> str:
            q = Path(p)
            try:
                return str(q.relative_to(self.home))
            except ValueError:
                return str(q.absolute())

        if self.s3 is not None:
            obj: dict[str, Any] = {"uri": self.object_store_uri}
            obj.update({k: v for k, v in (("endpoint_override", self.s3.endpoint_override), ("scheme", self.s3.scheme),
                                          ("region", self.s3.region), ("access_key", self.s3.access_key),
                                          ("secret_key", self.s3.secret_key)) if v})
        else:
            obj = {"uri": under_home(self.object_store_uri)}
        out: dict[str, Any] = {
            "object_store": obj,
            "state_store": {"backend": self.state_store_backend, "dsn": self.state_store_dsn or "",
                            "embedded_dir": under_home(self.embedded_pg_dir), "idle_minutes": self.idle_minutes},
            "spark": {"master": self.spark_master, **({"service": self.spark_service} if self.spark_service else {})},
            "airflow": {"home": under_home(self.airflow_home)},
        }
        if self.state_store_backend == "dynamodb":
            d = self.dynamodb
            out["state_store"].update({k: v for k, v in (
                ("region", d.region), ("endpoint_url", d.endpoint_url), ("table_prefix", d.table_prefix),
                ("access_key", d.access_key), ("secret_key", d.secret_key),
                ("object_store", d.object_store if d.object_store is None or d.object_store.startswith("s3://")
                 else under_home(d.object_store))) if v is not None})
            if not d.group_commit:
                out["state_store"]["group_commit"] = False
        if self.ingest_allowed_prefixes is not None:
            out["ingest"] = {"allowed_prefixes": [p if p.startswith("s3://") else under_home(p)
                                                  for p in self.ingest_allowed_prefixes]}
        if self.python_iterator_modules:
            out["iterators"] = {"python_modules": list(self.python_iterator_modules)}
        return out

    @classmethod
    def from_file(cls, path: os.PathLike[str] | str) -> SleeperConfig:
        """Read a configuration file holding a ``home`` key and the sections of
        :meth:`to_dict` (as ``sleeper_ops.spark.batch_files.write_config_file`` writes
        it); without ``home``, the file's directory is the home, as for a ``sleeper.toml``.

        Relative paths in the file are relative to that home; ``SLEEPER_STATE_STORE_DSN``
        applies as in :meth:`from_dict`. Raises ConfigError if the file is missing or invalid.
        """
        p = Path(path)
        try:
            raw = tomllib.loads(p.read_text())
        except OSError as e:
            raise ConfigError(f"cannot read the configuration file {p}: {e}") from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{p} is not valid TOML: {e}") from e
        home = raw.pop("home", None)
        if home is not None and not isinstance(home, str):
            raise ConfigError(f"{p}: home must be a string, got {home!r}")
        return cls.from_dict(Path(home) if home is not None else p.absolute().parent, raw)

    @classmethod
    def load(cls, home: Optional[os.PathLike[str] | str] = None, *, create: bool = True) -> SleeperConfig:
        """Read ``home/sleeper.toml``, writing the default first if it is missing."""
        h = Path(home) if home is not None else default_home()
        h = h.absolute()
        path = h / "sleeper.toml"
        if not path.exists():
            if not create:
                raise ConfigError(f"no configuration at {path}")
            import tomli_w

            h.mkdir(parents=True, exist_ok=True)
            path.write_text("# Sleeper configuration; see docs/operations/configuration.md.\n"
                            + tomli_w.dumps(DEFAULT_CONFIG))
        try:
            raw = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path} is not valid TOML: {e}") from e
        return cls.from_dict(h, raw)

    @classmethod
    def from_dict(cls, home: Path, raw: dict[str, Any]) -> SleeperConfig:
        obj = {**DEFAULT_CONFIG["object_store"], **raw.get("object_store", {})}
        ss = {**DEFAULT_CONFIG["state_store"], **raw.get("state_store", {})}
        spark = {**DEFAULT_CONFIG["spark"], **raw.get("spark", {})}
        airflow = {**DEFAULT_CONFIG["airflow"], **raw.get("airflow", {})}
        uri = str(obj["uri"])
        s3 = None
        if uri.startswith("s3://"):
            s3 = S3Options(endpoint_override=obj.get("endpoint_override") or None, scheme=obj.get("scheme", "https"),
                           region=obj.get("region") or None, access_key=obj.get("access_key") or None,
                           secret_key=obj.get("secret_key") or None)
        else:
            uri = str(_under(home, uri))
        backend = ss.get("backend", "postgres")
        if backend not in backend_names():
            raise ConfigError(f"state_store.backend must be one of {', '.join(backend_names())}, got {backend!r}")
        dsn = os.environ.get("SLEEPER_STATE_STORE_DSN") or ss.get("dsn") or None
        return cls(home, uri, s3, backend, dsn, _under(home, ss.get("embedded_dir", "pg")),
                   str(spark["master"]), _under(home, airflow["home"]),
                   _allowed_prefixes(home, _section(raw, "ingest").get("allowed_prefixes")),
                   DynamoDBSettings.from_section(home, ss), _idle_minutes(ss), _spark_service(spark),
                   python_modules_setting(_section(raw, "iterators").get("python_modules")))


def _spark_service(spark: dict[str, Any]) -> Optional[str]:
    """``spark.service``: an ``http(s)://host:port`` URL, or None when unset or empty."""
    value = spark.get("service") or None
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ConfigError(f"spark.service must be an http(s):// URL of the Spark service, got {value!r}")
    return value.rstrip("/")


def _idle_minutes(ss: dict[str, Any]) -> float:
    """``state_store.idle_minutes`` (or ``SLEEPER_PG_IDLE_MINUTES``): a number >= 0."""
    env = os.environ.get(IDLE_MINUTES_ENV)
    value: Any = env if env not in (None, "") else ss.get("idle_minutes", DEFAULT_IDLE_MINUTES)
    where = IDLE_MINUTES_ENV if env not in (None, "") else "state_store.idle_minutes"
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where} must be a number of minutes (0: stop with the last command), "
                          f"got {value!r}") from None
    if not minutes >= 0:
        raise ConfigError(f"{where} must be 0 or more minutes, got {value!r}")
    return minutes


def _section(raw: dict[str, Any], name: str) -> dict[str, Any]:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"[{name}] must be a table of settings, got {value!r}")
    return value


def _allowed_prefixes(home: Path, value: Any) -> Optional[tuple[str, ...]]:
    """``ingest.allowed_prefixes``: local ones made absolute (relative to ``home``)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(p, str) and p.strip() for p in value):
        raise ConfigError(f"ingest.allowed_prefixes must be a list of local directories or s3:// URIs, got {value!r}")
    out = []
    for p in value:
        if "://" in p and not p.startswith("s3://"):
            raise ConfigError(f"ingest.allowed_prefixes: {p!r} is neither a local directory nor an s3:// URI")
        out.append(p.rstrip("/") if p.startswith("s3://") else str(_under(home, p)))
    return tuple(out)


def _under(home: Path, p: str) -> Path:
    q = Path(p)
    return q if q.is_absolute() else home / q
