"""The Airflow provider face of the package (entry point ``apache_airflow_provider``).

Airflow's providers manager calls :func:`get_provider_info` to learn the connection
type ``sleeper`` (its hook, for the connection form and "Test"), the operators and the
plugin. Importing this module imports nothing of Airflow.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

PACKAGE = "sleeper-airflow"
_PROVIDER = "sleeper_ops.airflow"
_OPERATORS = ("base", "ingest", "maintenance", "compaction", "spark_compaction", "bulk_import", "emr", "export",
              "events")
_TRIGGERS = ("buffer", "visible", "import_input", "spark_service", "events")
_SENSORS = ("visible", "import_input")
_HOOK = "sleeper_ops.airflow.hooks.sleeper"
_ASSETS = "sleeper_ops.airflow.assets.sleeper"
_TEXT: dict[str, Any] = {"type": ["string", "null"]}
_SECRET: dict[str, Any] = {"type": ["string", "null"], "format": "password"}
#: The extra fields of a ``sleeper`` connection (see :mod:`sleeper_ops.airflow.hooks.connection`).
_CONN_FIELDS = (
    ("config_home", "Sleeper home (sleeper.toml)", "open the Sleeper this home's sleeper.toml configures, as "
                    "SLEEPER_HOME does; leave every other field empty", _TEXT),
    ("object_store_uri", "Object store", "s3://bucket/prefix, or a local path", _TEXT),
    ("endpoint_url", "S3 endpoint", "e.g. http://127.0.0.1:9000 for MinIO; empty for AWS", _TEXT),
    ("region", "S3 region", "e.g. eu-west-2", _TEXT),
    ("access_key", "S3 access key", "empty: the AWS credential chain", _TEXT),
    ("secret_key", "S3 secret key", "empty: the AWS credential chain", _SECRET),
    ("spark_master", "Spark master", "e.g. spark://host:7077; default local[*]", _TEXT),
    ("spark_service", "Spark service", "e.g. http://127.0.0.1:8998 (sleeper cluster); empty: spark-submit", _TEXT),
    ("home", "Sleeper home", "where relative paths and the embedded server live", _TEXT),
    ("state_store", "State store", "postgres (the fields above) or dynamodb; default postgres", _TEXT),
    ("dynamodb_table_prefix", "DynamoDB table prefix", "default sleeper-", _TEXT),
    ("aws_conn_id", "AWS connection", "its region, endpoint and keys reach S3 and DynamoDB (dynamodb: "
                                      "default aws_default)", _TEXT),
    ("python_iterator_modules", "Python iterator modules", "comma-separated modules (with their submodules) "
                                "tables' Python iterators may come from; default none", _TEXT),
)


def _version() -> str:
    try:
        return version(PACKAGE)
    except PackageNotFoundError:  # imported from a checkout that is not installed
        return "0+unknown"


def _modules(kind: str, names: tuple[str, ...]) -> list[str]:
    return [f"{_PROVIDER}.{kind}.{name}" for name in names]


def get_provider_info() -> dict[str, Any]:
    """The provider description Airflow validates against its provider_info schema."""
    return {
        "package-name": PACKAGE,
        "name": "Sleeper",
        "description": "Sleeper tables on Airflow: a log-structured merge tree of sorted Parquet files with "
                       "its metadata in a transactional state store.",
        "versions": [_version()],
        "integrations": [{"integration-name": "Sleeper", "external-doc-url": "https://github.com/gchq/sleeper",
                          "tags": ["software"]}],
        "hooks": [{"integration-name": "Sleeper", "python-modules": [_HOOK]}],
        "operators": [{"integration-name": "Sleeper", "python-modules": _modules("operators", _OPERATORS)}],
        "triggers": [{"integration-name": "Sleeper", "python-modules": _modules("triggers", _TRIGGERS)}],
        "sensors": [{"integration-name": "Sleeper", "python-modules": _modules("sensors", _SENSORS)}],
        "connection-types": [{
            "connection-type": "sleeper",
            "hook-class-name": f"{_HOOK}.SleeperHook",
            "hook-name": "Sleeper",
            "ui-field-behaviour": {
                "hidden-fields": [],
                "relabeling": {"host": "PostgreSQL host (empty: the embedded server)", "schema": "Database",
                               "login": "PostgreSQL user", "password": "PostgreSQL password"},
                "placeholders": {"schema": "sleeper", "port": "5432"},
            },
            "conn-fields": {name: {"label": label, "description": text, "schema": schema}
                            for name, label, text, schema in _CONN_FIELDS},
        }],
        "asset-uris": [{"schemes": ["sleeper"], "handler": f"{_ASSETS}.sanitize_uri",
                        "to_openlineage_converter": f"{_ASSETS}.convert_asset_to_openlineage"}],
        "extra-links": ["sleeper_ops.airflow.links.sleeper.SleeperTableLink"],
        "plugins": [{"name": "sleeper", "plugin-class": "sleeper_ops.orchestration.plugin.SleeperPlugin"}],
    }
