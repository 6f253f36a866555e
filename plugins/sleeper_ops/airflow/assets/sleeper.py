"""The ``sleeper`` assets: a table's asset and alias, and the URI scheme for Airflow's
providers manager (``asset-uris``).

A Sleeper asset is ``sleeper://<table>`` (files committed to the table) or
``sleeper://<table>/buffer`` (its write buffer passed a flush threshold) or
``sleeper://<table>/events`` (a batch of S3 event messages on its events queue).
:func:`sanitize_uri` refuses anything else (no table, a name Sleeper would refuse,
credentials, a port, a query, another path) with a ValueError saying why;
:func:`convert_asset_to_openlineage` names the table's dataset as the operators'
lineage does: namespace ``sleeper://<instance id>`` (:mod:`sleeper_ops.instance`: the
state store's own id, of the ``sleeper_default`` connection or ``SLEEPER_HOME``), name
``<table>``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import SplitResult, urlsplit

from statestore.catalog import table_name_problem

_PATHS = ("", "/", "/buffer", "/events")


def table_asset(table: str) -> Any:
    """The Airflow asset ``sleeper://<table>``: updated whenever files are committed to
    the table by ingest, the batcher or bulk import (the compaction DAG listens)."""
    from airflow.sdk import Asset

    return Asset(uri=f"sleeper://{table}", name=f"sleeper://{table}")


def commits_alias(table: str) -> Any:
    """The asset alias a committing operator declares; an event for :func:`table_asset`
    is added through it only when the task committed files (a task that committed
    nothing emits no event)."""
    from airflow.sdk import AssetAlias

    return AssetAlias(name=f"sleeper_commits_{table}")


def sanitize_uri(uri: SplitResult) -> SplitResult:
    """``uri`` if it is a Sleeper asset URI (see the module docstring), else ValueError."""
    table = uri.netloc
    if not table:
        raise ValueError("a sleeper:// asset URI names a table: sleeper://<table>, sleeper://<table>/buffer "
                         "or sleeper://<table>/events")
    if "@" in table or ":" in table:
        raise ValueError(f"a sleeper:// asset URI holds no credentials or port: {table!r}")
    problem = table_name_problem(table)
    if problem:
        raise ValueError(f"sleeper://{table}: {problem}")
    if uri.path not in _PATHS or uri.query or uri.fragment:
        raise ValueError(f"sleeper://{table}{uri.path}: the only paths are /buffer and /events, "
                         "and no query or fragment")
    return uri


def namespace(sleeper_conn_id: str = "sleeper_default") -> str:
    """``sleeper://<instance id>`` of the connection's state store (or of ``SLEEPER_HOME``'s):
    asked once per process (:func:`sleeper_ops.instance.config_namespace`)."""
    from sleeper_ops.airflow.hooks.sleeper import SleeperHook
    from sleeper_ops.instance import config_namespace

    return config_namespace(SleeperHook(sleeper_conn_id).get_config())


def convert_asset_to_openlineage(asset: Any, lineage_context: Any = None) -> Any:
    """The OpenLineage dataset of a Sleeper asset: its table's."""
    from airflow.providers.common.compat.openlineage.facet import Dataset

    return Dataset(namespace=namespace(), name=urlsplit(asset.uri).netloc)
