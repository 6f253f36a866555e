"""A Sleeper configuration from the fields of an Airflow connection of type ``sleeper``.

Pure (no Airflow import), so it is unit-tested on its own; :class:`~sleeper_ops.airflow.hooks.sleeper.SleeperHook`
reads the connection and calls :func:`config_from_connection`.

Fields of the connection:

* host, port, login, password, schema: the PostgreSQL state store (schema is the
  database, default ``sleeper``). No host: the embedded PostgreSQL under ``home``.
* extra (JSON object), every key optional:

  ====================  ==================================================================
  ``config_home``       a Sleeper home: the connection opens the Sleeper its ``sleeper.toml``
                        configures, exactly as ``SLEEPER_HOME`` would (the file must exist;
                        no other field or key may then be set). ``sleeper airflow`` writes
                        ``sleeper_default`` this way, holding no secret of its own
  ``state_store``       ``postgres`` (default) or ``dynamodb``
  ``dynamodb_table_prefix``  names of the DynamoDB tables (default ``sleeper-``)
  ``aws_conn_id``       an Airflow AWS connection (``dynamodb``: default ``aws_default``)
                        whose region, endpoint and keys, read through the amazon
                        provider's ``AwsBaseHook``, reach S3 and DynamoDB
  ``object_store_uri``  ``s3://bucket/prefix`` or a local path (default ``home/data``)
  ``endpoint_url``      S3 endpoint, e.g. ``http://127.0.0.1:9000`` (MinIO, moto)
  ``region``            S3 region
  ``access_key``        S3 credentials (default: the AWS chain)
  ``secret_key``
  ``spark_master``      e.g. ``spark://host:7077`` (default ``local[*]``)
  ``spark_service``     a standing Spark driver service, e.g. ``http://host:8998``
  ``home``              where relative paths and the embedded server live
  ``python_iterator_modules``  the modules tables' Python iterators may come from (a
                        list, or comma-separated text as the connection form gives it;
                        ``iterators.python_modules`` of sleeper.toml; default none)
  ====================  ==================================================================

The settings of the AWS connection (``aws``: ``region``, ``endpoint_url``,
``access_key``, ``secret_key``, as :class:`~sleeper_ops.airflow.hooks.sleeper.SleeperHook` reads
them) apply to S3 and to DynamoDB; the same keys in the extra override them for S3.

Unknown extra keys are refused, so a typo does not silently fall back to a default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional
from urllib.parse import quote, urlsplit

from sleeper_ops.config import SleeperConfig
from sleeper_ops.errors import ConfigError

EXTRA_KEYS = ("config_home", "object_store_uri", "endpoint_url", "region", "access_key", "secret_key", "spark_master",
              "spark_service", "home", "state_store", "dynamodb_table_prefix", "aws_conn_id", "python_iterator_modules")
#: the settings an AWS connection gives (see the module docstring)
AWS_KEYS = ("region", "endpoint_url", "access_key", "secret_key")
STATE_STORES = ("postgres", "dynamodb")
DEFAULT_DATABASE = "sleeper"
DEFAULT_AWS_CONN_ID = "aws_default"


def aws_conn_id_of(extra: Mapping[str, Any]) -> Optional[str]:
    """The AWS connection the extra names: ``aws_conn_id``, by default ``aws_default``
    for the DynamoDB state store, None (boto3's chain and the extra's own keys) otherwise."""
    named = extra.get("aws_conn_id")
    if named:
        return str(named)
    return DEFAULT_AWS_CONN_ID if extra.get("state_store") == "dynamodb" else None


def postgres_dsn(host: str, port: Optional[int], login: Optional[str], password: Optional[str],
                 database: Optional[str]) -> str:
    """A ``postgresql://`` URI from connection fields, every part percent-encoded."""
    auth = ""
    if login:
        auth = quote(login, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    if host.startswith("/"):  # a unix socket directory
        netloc = quote(host, safe="")
    else:
        netloc = f"[{host}]" if ":" in host else host
    if port:
        netloc += f":{int(port)}"
    return f"postgresql://{auth}{netloc}/{quote(database or DEFAULT_DATABASE, safe='')}"


def config_from_connection(*, host: Optional[str], port: Optional[int], login: Optional[str],
                           password: Optional[str], schema: Optional[str], extra: Mapping[str, Any],
                           default_home: Path, aws: Optional[Mapping[str, Optional[str]]] = None) -> SleeperConfig:
    """The configuration the connection describes (see the module docstring); ``aws``:
    the settings of its AWS connection, if it names one.

    Raises ConfigError for an unknown extra key or state store, or a malformed endpoint."""
    unknown = sorted(set(extra) - set(EXTRA_KEYS))
    if unknown:
        raise ConfigError(f"unknown keys {', '.join(unknown)} in the extra of the Sleeper connection; "
                          f"expected some of {', '.join(EXTRA_KEYS)}")
    if extra.get("config_home"):
        return _from_config_home(str(extra["config_home"]), extra,
                                 {"host": host, "port": port, "login": login, "password": password, "schema": schema})
    backend = str(extra.get("state_store") or "postgres")
    if backend not in STATE_STORES:
        raise ConfigError(f"state_store {backend!r} in the extra of the Sleeper connection is not one of "
                          f"{', '.join(STATE_STORES)}")
    aws_settings = {k: str(v) for k, v in (aws or {}).items() if k in AWS_KEYS and v}
    extra = {**aws_settings, **extra}
    home = Path(str(extra.get("home") or default_home))
    object_store: dict[str, Any] = {"uri": str(extra.get("object_store_uri") or "data")}
    endpoint = extra.get("endpoint_url")
    if endpoint:
        parts = urlsplit(str(endpoint))
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigError(f"endpoint_url {endpoint!r} of the Sleeper connection is not an http(s) URL")
        object_store.update(endpoint_override=parts.netloc, scheme=parts.scheme)
    for key in ("region", "access_key", "secret_key"):
        if extra.get(key):
            object_store[key] = str(extra[key])
    dsn = postgres_dsn(host, port, login, password, schema) if host else ""
    state_store: dict[str, Any] = {"backend": backend, "dsn": dsn}
    if backend == "dynamodb":
        state_store.update({k: str(extra[k]) for k in AWS_KEYS if extra.get(k)})
        if extra.get("dynamodb_table_prefix"):
            state_store["table_prefix"] = str(extra["dynamodb_table_prefix"])
    raw = {"object_store": object_store, "state_store": state_store,
           "spark": {"master": str(extra.get("spark_master") or "local[*]"),
                     "service": str(extra.get("spark_service") or "")}}
    modules = extra.get("python_iterator_modules")
    if isinstance(modules, str):  # the connection form's text: comma-separated
        modules = [m.strip() for m in modules.split(",") if m.strip()]
    if modules is not None:
        raw["iterators"] = {"python_modules": modules}
    return SleeperConfig.from_dict(home.absolute(), raw)


def _from_config_home(home: str, extra: Mapping[str, Any], fields: Mapping[str, Any]) -> SleeperConfig:
    """The configuration of ``home/sleeper.toml``; ConfigError (one line) when the connection
    sets anything else, or the file is missing (it is never created here)."""
    others = [k for k, v in fields.items() if v not in (None, "")] + sorted(k for k in extra if k != "config_home")
    if others:
        raise ConfigError(f"config_home {home} of the Sleeper connection takes every setting from its sleeper.toml, "
                          f"but the connection also sets {', '.join(others)}: remove them, or config_home")
    if not (Path(home) / "sleeper.toml").is_file():
        raise ConfigError(f"config_home {home} of the Sleeper connection has no sleeper.toml")
    return SleeperConfig.load(Path(home), create=False)
