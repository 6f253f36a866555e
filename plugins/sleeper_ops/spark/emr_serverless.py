"""Bulk import on EMR Serverless: the package a job runs and the job request that starts it.

A table whose ``sleeper.table.bulk.import.platform`` is ``emr_serverless`` imports on
an EMR Serverless application instead of the configuration's Spark. The job runs the
same driver as spark-submit does (``spark_apps/bulk_import.py`` ->
:func:`sleeper_ops.spark.bulk_driver.main`), so the commit is the same: once per import
key, checked by the state store (:mod:`sleeper_ops.bulk_import.job`). A retried or
repeated job of a date commits nothing twice; a failed one commits nothing.

The package (:func:`build_package`, ``sleeper bulk-import --package DEST``) is four
objects under the table's ``sleeper.table.bulk.import.emr.serverless.package`` prefix:

=====================  ==========================================================================
``bulk_import.py``     the entry point (``spark_apps/bulk_import.py`` as it is)
``sleeper.zip``        the pure-Python packages ``sleeper_ops`` and ``statestore`` (with the
                       PostgreSQL DDL), for ``spark.submit.pyFiles``
``sleeper.toml``       the configuration the job opens, with no secret in it: no S3 or DynamoDB
                       keys (the job's execution role supplies credentials) and no DSN password
                       (``SLEEPER_STATE_STORE_DSN`` in the driver's environment replaces the DSN)
``environment.tar.gz`` the Python environment (a venv-pack archive with Python 3.11 and the
                       third-party libraries, built on Amazon Linux; given with
                       ``--environment``, see docs/deploy.md), unpacked as ``./environment``
=====================  ==========================================================================

:func:`job_request` is what the dated DAG's ``EmrServerlessStartJobOperator`` sends,
built from table properties alone (no I/O while Airflow parses DAGs); the sources,
import key and run id are Airflow templates rendered on the run.
"""

from __future__ import annotations

import importlib.resources
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import urlsplit, urlunsplit

import tomli_w

from sleeper_ops.errors import ConfigError
from sleeper_ops.io.storage import ObjectStore
from sleeper_ops.spark.submit import spark_app_path
from statestore.properties import (
    BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID,
    BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN,
    BULK_IMPORT_EMR_SERVERLESS_PACKAGE,
    EMR_PROPERTIES,
)

if TYPE_CHECKING:
    from sleeper_ops.config import SleeperConfig
    from statestore.catalog import TableInfo

ENTRY_POINT = "bulk_import.py"
LIBRARY = "sleeper.zip"
CONFIG = "sleeper.toml"
ENVIRONMENT = "environment.tar.gz"
#: the packages the library zip holds (the driver and executors import nothing else of ours)
LIBRARY_PACKAGES = ("sleeper_ops", "statestore")
#: the Python of the unpacked environment, relative to the driver's and executors' working dirs
PYTHON = "./environment/bin/python"
#: a fixed time for every zip entry, so the same code gives the same bytes
_ZIP_TIME = (2024, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class EmrJobRequest:
    """The arguments of an EMR Serverless ``StartJobRun`` (and of the provider's
    ``EmrServerlessStartJobOperator``) for one bulk import."""

    application_id: str
    execution_role_arn: str
    name: str
    job_driver: dict[str, Any]
    configuration_overrides: dict[str, Any]


def spark_properties(package: str) -> dict[str, str]:
    """The Spark properties of a job run from ``package``: the library on the Python
    path, the environment archive unpacked as ``./environment`` and its Python used by
    the driver and the executors."""
    package = package.rstrip("/")
    return {
        "spark.submit.pyFiles": f"{package}/{LIBRARY}",
        "spark.archives": f"{package}/{ENVIRONMENT}#environment",
        "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": PYTHON,
        "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": PYTHON,
        "spark.executorEnv.PYSPARK_PYTHON": PYTHON,
    }


def job_arguments(table: TableInfo, *, package: str, sources: str, import_key: str, run_id: str) -> list[str]:
    """The entry point's arguments (see :func:`sleeper_ops.spark.bulk_driver.main`):
    the configuration in the package, the table, the sources (one string; several
    separated by commas), the import key and the run id."""
    return ["--config-file", f"{package.rstrip('/')}/{CONFIG}", "--table", table.name, "--sources", sources,
            "--import-key", import_key, "--run-id", run_id]


def job_request(table: TableInfo, *, sources: str, import_key: str, run_id: str) -> EmrJobRequest:
    """The request that starts ``table``'s bulk import of ``sources`` under
    ``import_key`` on EMR Serverless, from the table's emr.serverless properties.
    Raises ConfigError naming a missing property."""
    missing = [name for name in EMR_PROPERTIES if not table.get(name)]
    if missing:
        raise ConfigError(f"table {table.name}: bulk import on EMR Serverless needs {', '.join(missing)}")
    package = str(table.get(BULK_IMPORT_EMR_SERVERLESS_PACKAGE)).rstrip("/")
    driver = {"sparkSubmit": {
        "entryPoint": f"{package}/{ENTRY_POINT}",
        "entryPointArguments": job_arguments(table, package=package, sources=sources, import_key=import_key,
                                             run_id=run_id),
        "sparkSubmitParameters": " ".join(f"--conf {k}={v}" for k, v in spark_properties(package).items()),
    }}
    return EmrJobRequest(application_id=str(table.get(BULK_IMPORT_EMR_SERVERLESS_APPLICATION_ID)),
                         execution_role_arn=str(table.get(BULK_IMPORT_EMR_SERVERLESS_EXECUTION_ROLE_ARN)),
                         name=f"sleeper-bulk-import-{table.name}", job_driver=driver,
                         configuration_overrides={})


# ----- the package ------------------------------------------------------------------------------
def library_zip() -> bytes:
    """``sleeper_ops`` and ``statestore`` as one zip for ``spark.submit.pyFiles``: their
    ``.py`` files and package data (the PostgreSQL DDL under ``statestore/postgres/ddl``),
    no caches; the same code gives the same bytes."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for package in LIBRARY_PACKAGES:
            _add_tree(z, Path(str(importlib.resources.files(package))), package)
        _add_tree(z, Path(str(importlib.resources.files("statestore.postgres.ddl"))), "statestore/postgres/ddl")
    return buf.getvalue()


def _add_tree(z: zipfile.ZipFile, root: Path, arcroot: str) -> None:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or "__pycache__" in rel.parts or path.suffix in (".pyc", ".pyo"):
            continue
        name = f"{arcroot}/{rel.as_posix()}"
        if name in z.namelist():
            continue
        info = zipfile.ZipInfo(name, _ZIP_TIME)
        info.compress_type = zipfile.ZIP_DEFLATED
        info.external_attr = 0o644 << 16
        z.writestr(info, path.read_bytes())


def _without_password(dsn: str) -> str:
    """``dsn`` (a URI) without its password; other forms are kept only when they hold none."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        host = parts.hostname or ""
        netloc = f"{parts.username}@{host}" if parts.username else host
        if parts.port is not None:
            netloc += f":{parts.port}"
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    if "password" in dsn:
        raise ConfigError("the state store DSN holds a password: give it as a URI (its password is left out of "
                          "the package) or set it in the job's SLEEPER_STATE_STORE_DSN")
    return dsn


def job_config(config: SleeperConfig) -> dict[str, Any]:
    """``config`` as the ``sleeper.toml`` an EMR job opens: every setting but the
    secrets (S3 and DynamoDB keys, the DSN's password); the job's execution role gives
    it AWS credentials. Refuses (ConfigError) a configuration whose data are on local
    disk: an EMR job cannot reach them."""
    if config.s3 is None:
        raise ConfigError(f"the object store {config.object_store_uri} is not on S3: an EMR Serverless job "
                          "cannot reach it")
    doc = config.to_dict()
    for section in ("object_store", "state_store"):
        for secret in ("access_key", "secret_key"):
            doc[section].pop(secret, None)
    if doc["state_store"].get("dsn"):
        doc["state_store"]["dsn"] = _without_password(doc["state_store"]["dsn"])
    for local in ("embedded_dir",):  # meaningless on EMR
        doc["state_store"].pop(local, None)
    doc.pop("airflow", None)
    doc.pop("ingest", None)
    return doc


def build_package(dest: str, config: SleeperConfig, *, environment: Optional[str] = None) -> list[str]:
    """Write the package (see the module docstring) under ``dest`` (``s3://bucket/prefix``
    or a directory), reached with ``config``'s S3 options; ``environment`` is a local
    ``.tar.gz`` to upload as the environment. Returns the URIs written. Each object is
    one whole PUT, so a job never reads half of one."""
    objects: dict[str, bytes] = {
        ENTRY_POINT: spark_app_path(ENTRY_POINT).read_bytes(),
        LIBRARY: library_zip(),
        CONFIG: ("# Sleeper configuration of EMR Serverless bulk import jobs (no secrets: the job's "
                 "execution role gives credentials).\n" + tomli_w.dumps(job_config(config))).encode(),
    }
    if environment is not None:
        env = Path(environment)
        if not env.is_file():
            raise ConfigError(f"the environment archive {environment} is not a file")
        objects[ENVIRONMENT] = env.read_bytes()
    store = ObjectStore(dest, config.s3 if dest.startswith("s3://") else None)
    for key, data in objects.items():
        store.put(key, data)
    return [f"{dest.rstrip('/')}/{key}" for key in objects]
