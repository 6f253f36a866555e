"""SleeperVisibleSensor on a table that does not exist: the task fails in one line naming
the table and the connection, not with a TableNotFoundError traceback, and a deferred
sensor's trigger ends rather than polling forever."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

pytest.importorskip("airflow")

from airflow.sdk.exceptions import AirflowFailException

from sleeper_ops.airflow.hooks.sleeper import SleeperHook
from sleeper_ops.airflow.sensors.visible import SleeperVisibleSensor
from sleeper_ops.airflow.triggers.visible import SleeperVisibleTrigger
from tests.unit.sleeper_ops.operator_runner import execute_task

MESSAGE = r"^table nosuch does not exist in the Sleeper of connection 'sleeper_default'"


def test_a_sensor_on_an_unknown_table_fails_in_one_line_naming_it(sleeper: Any) -> None:
    sensor = SleeperVisibleSensor(task_id="wait", table="nosuch", min_records=1, poke_interval=0.01, timeout=1)
    with pytest.raises(AirflowFailException, match=MESSAGE) as e:
        execute_task(sensor, sleeper)
    assert "\n" not in str(e.value)


def test_a_deferrable_sensor_on_an_unknown_table_fails_before_deferring(sleeper: Any) -> None:
    sensor = SleeperVisibleSensor(task_id="wait", table="nosuch", import_key="k", deferrable=True)
    with pytest.raises(AirflowFailException, match=MESSAGE):
        execute_task(sensor, sleeper)


def test_a_trigger_whose_table_is_gone_ends_and_the_sensor_fails_naming_it(sleeper: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(SleeperHook, "get_conn", lambda self: contextlib.nullcontext(sleeper))
    trigger = SleeperVisibleTrigger(table="nosuch", min_records=1, poll_seconds=0.01)

    async def first_event() -> Any:
        async for event in trigger.run():
            return event

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=10))
    assert event.payload["status"] == "error"
    sensor = SleeperVisibleSensor(task_id="wait", table="nosuch", min_records=1, deferrable=True)
    with pytest.raises(AirflowFailException, match=MESSAGE):
        sensor.execute_complete({}, event.payload)
