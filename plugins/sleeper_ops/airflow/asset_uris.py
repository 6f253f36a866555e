"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.assets.sleeper`."""

from __future__ import annotations

from sleeper_ops.airflow.assets.sleeper import convert_asset_to_openlineage, namespace, sanitize_uri
from sleeper_ops.airflow.moved import warn_moved

__all__ = ["convert_asset_to_openlineage", "namespace", "sanitize_uri"]

warn_moved(__name__)
