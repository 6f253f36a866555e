"""A dated bulk import waits for its date's input: what counts as there
(missing_input), the trigger that polls it until a deadline, and the one line the
sensor fails with after ``sleeper.table.bulk.import.wait.hours``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.bulk_import.dated import missing_input, wait_hours
from statestore.errors import PropertyError

pytest.importorskip("airflow")

from airflow.sdk.exceptions import AirflowFailException

from sleeper_ops.airflow.sensors.import_input import SleeperImportInputSensor
from sleeper_ops.airflow.triggers import import_input
from sleeper_ops.airflow.triggers.import_input import ImportInputTrigger

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "n", "type": "LongType"}]}
WAIT = "sleeper.table.bulk.import.wait.hours"


def _write_day(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": ["a", "b"], "n": [1, 2]}), folder / "part.parquet")


def test_a_date_is_ready_when_every_source_has_input_or_its_key_is_already_imported(sleeper: Any,
                                                                                    tmp_path: Path) -> None:
    sleeper.create_table("events", SCHEMA)
    day, other = tmp_path / "raw" / "2026-01-01", tmp_path / "raw" / "2026-01-02"
    missing = missing_input(sleeper, "events", [str(day), str(other)])
    assert missing == [f"{day}: no input files (.parquet, .csv or .jsonl) found",
                       f"{other}: no input files (.parquet, .csv or .jsonl) found"]
    _write_day(day)
    assert missing_input(sleeper, "events", [str(day), str(other)]) == [missing[1]]
    _write_day(other)
    assert missing_input(sleeper, "events", [str(day), str(other)]) == []


def test_the_wait_is_a_positive_number_of_hours_defaulting_to_six(sleeper: Any) -> None:
    table = sleeper.create_table("events", SCHEMA)
    assert wait_hours(table.info.properties) == 6.0
    sleeper.set_properties("events", {WAIT: "0.5"})
    assert wait_hours(sleeper.table("events").info.properties) == 0.5
    for bad in ("0", "-1", "soon", "inf"):
        with pytest.raises(PropertyError, match="hours"):
            sleeper.set_properties("events", {WAIT: bad})


class _Hook:
    """Stands for SleeperHook: hands out the test's Sleeper, and calls ``on_open`` with
    the number of the check about to run (1, 2, ...)."""

    def __init__(self, sleeper: Any, on_open: Any) -> None:
        self.sleeper, self.on_open, self.opened = sleeper, on_open, 0

    def __call__(self, conn_id: str) -> _Hook:
        return self

    @contextlib.contextmanager
    def get_conn(self) -> Iterator[Any]:
        self.opened += 1
        self.on_open(self.opened)
        yield self.sleeper


def _events(trigger: ImportInputTrigger) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [e.payload async for e in trigger.run()]
    return asyncio.run(asyncio.wait_for(collect(), timeout=30))


def test_the_trigger_fires_ready_once_the_input_arrives(sleeper: Any, tmp_path: Path, monkeypatch: Any) -> None:
    sleeper.create_table("events", SCHEMA)
    day = tmp_path / "raw" / "2026-01-01"
    hook = _Hook(sleeper, lambda n: _write_day(day) if n == 3 else None)  # arrives before the third check
    monkeypatch.setattr(import_input, "SleeperHook", hook)
    trigger = ImportInputTrigger(table="events", sources=[str(day)], import_key="k", deadline=time.time() + 60,
                                 poll_seconds=0)
    assert _events(trigger) == [{"status": "ready", "table": "events"}]
    assert hook.opened == 3


def test_the_trigger_gives_up_at_its_deadline_naming_what_is_missing(sleeper: Any, tmp_path: Path,
                                                                     monkeypatch: Any) -> None:
    sleeper.create_table("events", SCHEMA)
    day = tmp_path / "raw" / "2026-01-01"
    monkeypatch.setattr(import_input, "SleeperHook", _Hook(sleeper, lambda n: None))
    trigger = ImportInputTrigger(table="events", sources=[str(day)], import_key=None, deadline=time.time() - 1)
    assert _events(trigger) == [{"status": "timeout", "table": "events",
                                 "missing": [f"{day}: no input files (.parquet, .csv or .jsonl) found"]}]
    kwargs = trigger.serialize()[1]
    assert ImportInputTrigger(**kwargs).deadline == trigger.deadline, "a restarted triggerer keeps the deadline"


def test_the_sensor_fails_with_one_line_after_the_wait_and_succeeds_when_ready() -> None:
    sensor = SleeperImportInputSensor(task_id="wait_for_input", table="events", source="/raw/2026-01-01/",
                                      wait_hours=6, interval="2026-01-01")
    sensor.execute_complete({}, {"status": "ready", "table": "events"})
    with pytest.raises(AirflowFailException) as failed:
        sensor.execute_complete({}, {"status": "timeout", "table": "events",
                                     "missing": ["/raw/2026-01-01/: no input files (.parquet, .csv or .jsonl) found"]})
    assert str(failed.value) == (
        "table events: no input for the bulk import of 2026-01-01 after waiting 6 h "
        "(sleeper.table.bulk.import.wait.hours): /raw/2026-01-01/: no input files (.parquet, .csv or .jsonl) found")
