"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.sensors.import_input`,
:mod:`sleeper_ops.airflow.triggers.import_input`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.sensors.import_input import SleeperImportInputSensor
from sleeper_ops.airflow.triggers.import_input import ImportInputTrigger

__all__ = ["ImportInputTrigger", "SleeperImportInputSensor"]

warn_moved(__name__)
