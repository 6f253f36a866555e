"""Table properties are checked when they are set, not when they are used: an iterator
that does not fit the schema or cannot be imported is refused by ``table set``, ``table
create --property`` and the Python API alike; any property can be cleared; a table that
already holds a broken iterator still answers describe, unset and delete, and its
queries fail with one line naming the property to fix."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from sleeper_ops.errors import ConfigError
from statestore.errors import PropertyError
from tests.unit.sleeper_ops.cli_runner import run_cli

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "count", "type": "LongType"}, {"name": "note", "type": "StringType"}]}
AGG = "sleeper.table.iterator.aggregation"
PYTHON = "sleeper.table.iterator.python"
AGEOFF = "sleeper.table.iterator.ageoff"


@pytest.fixture
def sleeper(tmp_path):
    """A Sleeper allowing Python iterators from ``nosuchmod`` and ``json``
    (``iterators.python_modules``), so the checks after the allow-list show."""
    from sleeper_ops import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from statestore.memory import InMemoryStateStore

    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")),
                python_iterator_modules=("nosuchmod", "json"))
    yield s
    s.close()


@pytest.fixture
def events(sleeper):
    """Table ``events`` holding keys a and b."""
    sleeper.create_table("events", SCHEMA).ingest(pa.table({"key": ["a", "b"], "count": [1, 2], "note": ["x", "y"]}))
    return sleeper


@pytest.fixture
def cli(events, monkeypatch, capsys):
    def run(*args: str) -> tuple[int, str, str]:
        return run_cli(events, monkeypatch, capsys, *args)
    return run


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("prop,value,reason", [
    (AGG, "sum(x)", "no value field 'x'"),
    (AGG, "sum(count)", "missing note"),
    (AGG, "sum(count),sum(note)", "sum(note) needs an IntType or LongType field"),
    (PYTHON, "nosuchmod:fn", "cannot import module 'nosuchmod'"),
    (PYTHON, "json:no_such_function", "has no attribute 'no_such_function'"),
    (AGEOFF, "note:1000", "age-off needs an IntType or LongType field"),
    (AGEOFF, "missing:1000", "no field 'missing'"),
], ids=["agg-unknown-field", "agg-missing-field", "agg-wrong-type", "python-no-module", "python-no-function",
        "ageoff-wrong-type", "ageoff-unknown-field"])
def test_a_bad_iterator_is_refused_when_set_and_the_table_is_unchanged(events, cli, prop, value, reason):
    code, out, err = cli("table", "set", "events", f"{prop}={value}")
    assert code == 1 and out == ""
    line = one_error_line(err)
    assert reason in line and prop in line
    assert events.table("events").info.properties == {}
    with pytest.raises(ConfigError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        events.set_properties("events", {prop: value})
    assert events.state_store.get_table("events").properties == {}


def test_a_bad_iterator_is_refused_at_table_create(sleeper, monkeypatch, capsys, tmp_path):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    code, _, err = run_cli(sleeper, monkeypatch, capsys, "table", "create", "t", "--schema",
                           str(tmp_path / "schema.json"), "--property", f"{AGG}=sum(x)")
    assert code == 1 and "no value field 'x'" in one_error_line(err)
    assert sleeper.tables() == []


def test_a_good_iterator_is_set_and_applies_to_queries(events, cli):
    code, out, _ = cli("table", "set", "events", f"{AGG}=sum(count),max(note)")
    assert code == 0 and out.strip() == f"table events: set {AGG}=sum(count),max(note)"
    assert events.table("events").info.properties == {AGG: "sum(count),max(note)"}


def test_unset_and_an_empty_value_clear_any_property(events, cli):
    assert cli("table", "set", "events", "sleeper.table.gc.delay.minutes=30", f"{AGG}=sum(count),max(note)")[0] == 0
    code, out, _ = cli("table", "unset", "events", AGG)
    assert code == 0 and out.strip() == f"table events: cleared {AGG}"
    assert events.table("events").info.properties == {"sleeper.table.gc.delay.minutes": "30"}
    code, out, _ = cli("table", "set", "events", "sleeper.table.gc.delay.minutes=")
    assert code == 0 and out.strip() == "table events: cleared sleeper.table.gc.delay.minutes"
    assert events.table("events").info.properties == {}
    assert events.table("events").info.all_properties()["sleeper.table.gc.delay.minutes"] == "15"


def test_a_table_holding_a_broken_iterator_still_answers_describe_unset_and_delete(events, cli):
    events.state_store.update_properties("events", {PYTHON: "nosuchmod:fn"})  # set before the checks existed
    code, out, _ = cli("table", "describe", "events")
    assert code == 0 and f"* {PYTHON} = nosuchmod:fn" in out
    for args in (("query", "events", "--key", '"a"'), ("sql", "SELECT * FROM events")):
        code, out, err = cli(*args)
        line = one_error_line(err)
        assert code == 1 and out == ""
        assert f"table 'events': {PYTHON}='nosuchmod:fn': cannot import module 'nosuchmod'" in line
        assert f"sleeper table unset events {PYTHON}" in line
    assert cli("table", "unset", "events", PYTHON)[0] == 0
    code, out, _ = cli("query", "events", "--key", '"a"')
    assert code == 0 and json.loads(out) == {"key": "a", "count": 1, "note": "x"}
    events.state_store.update_properties("events", {AGG: "sum(nothing)"})
    assert cli("table", "delete", "events", "--yes")[0] == 0
    assert events.tables() == []


def test_an_unknown_property_name_suggests_the_nearest(events, cli):
    code, _, err = cli("table", "set", "events", "gc.delay.minutes=30")
    assert code == 1
    assert "unknown table property 'gc.delay.minutes'; did you mean sleeper.table.gc.delay.minutes?" \
        in one_error_line(err)
    with pytest.raises(PropertyError, match="did you mean sleeper.table.compaction.strategy"):
        events.set_properties("events", {"sleeper.table.compaction.stratgy": "basic"})


def test_table_set_without_equals_explains_name_value(cli):
    code, _, err = cli("table", "set", "events", "sleeper.table.online")
    line = one_error_line(err)
    assert code == 2 and "NAME=VALUE" in line and "--property" not in line


@pytest.mark.parametrize("name", ["bad name!", "a/b", "événements", "a..b", "x" * 95, "x" * 150, ""])
def test_a_table_name_that_cannot_be_a_dag_id_is_refused_with_the_rule(sleeper, monkeypatch, capsys, tmp_path, name):
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    schema = str(tmp_path / "schema.json")
    code, _, err = run_cli(sleeper, monkeypatch, capsys, "table", "create", name, "--schema", schema)
    assert code == 1 and "ASCII letters, digits, '_', '-' and '.'" in one_error_line(err)
    assert sleeper.tables() == []


@pytest.mark.parametrize("name", ["events", "Events-2024.v1", "a_b", "x" * 94])
def test_a_table_name_that_is_taken_gives_every_dag_of_the_table(sleeper, name):
    """Airflow takes its DAG ids (250 characters) and its DAG tag ``table:<name>`` (100)."""
    from sleeper_ops.orchestration.dag_factory import table_dags_problem

    info = sleeper.create_table(name, SCHEMA, properties={
        "sleeper.table.bulk.import.source": "s3://raw/{{ ds }}/",
        "sleeper.table.export.destination": "s3://out/{{ ds }}/"}).info
    assert table_dags_problem(info) is None


def test_rename_to_a_bad_name_is_refused_and_list_reports_old_bad_names(events, cli):
    code, _, err = cli("table", "rename", "events", "new events")
    assert code == 1 and "'new events' cannot be a table name" in one_error_line(err)
    events.state_store.rename_table("events", "old events")  # a name from before names were checked
    code, out, err = cli("table", "list")
    assert code == 0 and out.startswith("old events\t")
    assert "warning: 'old events' cannot be a table name" in err
    assert "sleeper table rename 'old events' NEW_NAME" in err
    assert cli("table", "rename", "old events", "events")[0] == 0
    assert cli("table", "list")[2] == ""


def test_setting_a_bulk_import_source_records_when_the_dated_import_starts(events):
    from datetime import UTC, datetime

    from sleeper_ops.bulk_import.dated import import_start, with_import_start

    source, start = "sleeper.table.bulk.import.source", "sleeper.table.bulk.import.start"
    before = datetime.now(UTC).replace(second=0, microsecond=0)
    events.set_properties("events", {source: "s3://raw/{{ ds }}/"})
    recorded = import_start(events.table("events").info.properties[start])
    assert recorded is not None and before <= recorded <= datetime.now(UTC)
    events.set_properties("events", {source: "s3://other/{{ ds }}/"})
    assert import_start(events.table("events").info.properties[start]) == recorded, "kept when the source changes"
    assert with_import_start({}, {source: "x", start: "2026-03-01"}) == {source: "x", start: "2026-03-01"}
    assert import_start("2026-03-01") == datetime(2026, 3, 1, tzinfo=UTC)
    with pytest.raises(PropertyError, match="ISO 8601"):
        events.set_properties("events", {start: "yesterday"})
    t = events.create_table("dated", SCHEMA, properties={source: "s3://raw/{{ ds }}/"})
    assert start in t.info.properties
