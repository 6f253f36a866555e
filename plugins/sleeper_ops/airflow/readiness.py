"""Deprecated path, removed in the next release (:mod:`sleeper_ops.airflow.moved`): import
from :mod:`sleeper_ops.airflow.sensors.visible`,
:mod:`sleeper_ops.airflow.triggers.visible`."""

from __future__ import annotations

from sleeper_ops.airflow.moved import warn_moved
from sleeper_ops.airflow.sensors.visible import SleeperVisibleSensor
from sleeper_ops.airflow.triggers.visible import SleeperVisibleTrigger, visible

__all__ = ["SleeperVisibleSensor", "SleeperVisibleTrigger", "visible"]

warn_moved(__name__)
