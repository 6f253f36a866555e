"""Issue 34, findings 5 and 6 walked as a user meets them: what used to be accepted when set
and fail later, or chosen silently, is now refused in one line when set, or does what the
docs say. Each case is named after its finding; all run in process on the in-memory state
store (a ``sleeper.toml`` naming it), through the ``sleeper`` command as a user types it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import sleeper_ops.api
from tests.unit.sleeper_ops.cli_runner import invoke_cli

SCHEMA = json.dumps({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                     "valueFields": [{"name": "count", "type": "LongType"}]})
Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """SLEEPER_HOME on the in-memory state store; every command shares one Sleeper of it."""
    h = tmp_path / "home"
    h.mkdir()
    (h / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n')
    monkeypatch.setenv("SLEEPER_HOME", str(h))
    shared = sleeper_ops.api.Sleeper(h)
    monkeypatch.setattr(sleeper_ops.api, "Sleeper", lambda given: contextlib.nullcontext(shared))
    yield h
    shared.close()


@pytest.fixture
def run(home: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    def invoke(*args: str) -> tuple[int, str, str]:
        return invoke_cli(capsys, *args)
    return invoke


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def schema_file(tmp_path: Path) -> str:
    path = tmp_path / "schema.json"
    path.write_text(SCHEMA)
    return str(path)


def records(tmp_path: Path, *rows: dict[str, object], name: str = "rows.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_finding_6_sql_reads_the_table_named_as_written(run: Run, tmp_path: Path) -> None:
    assert run("table", "create", "Events", "--schema", schema_file(tmp_path))[0] == 0
    assert run("table", "create", "events", "--schema", schema_file(tmp_path))[0] == 0
    assert run("ingest", "Events", records(tmp_path, {"key": "a", "count": 1}))[0] == 0
    assert run("ingest", "events", records(tmp_path, {"key": "b", "count": 2}, {"key": "c", "count": 3}))[0] == 0
    code, out, _ = run("sql", "SELECT count(*) AS n FROM Events")
    assert (code, [json.loads(r) for r in out.splitlines()]) == (0, [{"n": 1}])
    code, _, err = run("sql", "SELECT * FROM T")
    assert code != 0 and "no table named 'T'" in one_line(err)


def test_finding_6_range_null_is_unbounded_at_either_end(run: Run, tmp_path: Path) -> None:
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    assert run("ingest", "t", records(tmp_path, {"key": "", "count": 0}, {"key": "b", "count": 2}))[0] == 0
    code, out, err = run("query", "t", "--range", "null", "null")
    assert (code, [json.loads(r)["key"] for r in out.splitlines()]) == (0, ["", "b"]), err
    code, out, err = run("query", "t", "--range", "null", '"b"')
    assert (code, [json.loads(r)["key"] for r in out.splitlines()]) == (0, [""]), err


def test_finding_6_a_future_as_of_is_refused(run: Run, tmp_path: Path) -> None:
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    assert run("ingest", "t", records(tmp_path, {"key": "a", "count": 1}))[0] == 0
    for args in (("query", "t", "--range", "null", "null"), ("sql", "SELECT * FROM t")):
        code, out, err = run(*args, "--as-of", "2999-01-01T00:00:00Z")
        line = one_line(err)
        assert code == 1 and out == "" and "2999-01-01" in line and "future" in line, err
        code, _, err = run(*args, "--as-of", "999")
        assert code == 1 and "999" in one_line(err), err


def test_finding_6_an_empty_json_lines_file_names_the_file_and_table(run: Run, tmp_path: Path) -> None:
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    for command in ("ingest", "write"):
        code, out, err = run(command, "t", str(empty))
        line = one_line(err)
        assert code == 1 and "empty.jsonl" in line and "'t'" in line and "empty" in line, err


def test_finding_6_a_missing_value_field_is_null_as_documented(run: Run, tmp_path: Path) -> None:
    """Value fields are nullable (docs/usage/ingest.md): a JSON record leaving one out stores
    null; leaving out a key field is refused in one line naming the line and the field."""
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    assert run("write", "t", records(tmp_path, {"key": "a"}))[0] == 0
    code, out, _ = run("query", "t", "--key", '"a"')
    assert (code, [json.loads(r) for r in out.splitlines()]) == (0, [{"key": "a", "count": None}])
    code, _, err = run("ingest", "t", records(tmp_path, {"count": 1}, name="nokey.jsonl"))
    line = one_line(err)
    assert code == 1 and "nokey.jsonl" in line and "'key'" in line, err


@pytest.fixture
def rest(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    """A REST client of the app over an in-memory Sleeper, and that Sleeper, holding table
    ``t`` with records a and b ingested."""
    import warnings

    from sleeper_ops import Sleeper
    from sleeper_ops.io.storage import ObjectStore
    from sleeper_ops.web.rest import create_app
    from statestore.memory import InMemoryStateStore

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
        from fastapi.testclient import TestClient
    s = Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data")))
    s.create_table("t", SCHEMA).ingest([records(tmp_path, {"key": "a", "count": 1}, {"key": "b", "count": 2})])
    with TestClient(create_app(lambda: s)) as client:
        yield client, s
    s.close()


def test_finding_6_rest_reads_as_of_like_the_cli(rest: tuple[Any, Any], tmp_path: Path) -> None:
    client, s = rest
    t = s.table("t")
    ingested = t.history(limit=1)[0].number
    t.ingest([records(tmp_path, {"key": "d", "count": 4}, name="later.jsonl")])
    t.write([{"key": "c", "count": 3}])  # in the write buffer, which as-of reads exclude
    now = client.get("/tables/t/records", params={"min": "null"})
    assert [r["key"] for r in now.json()["records"]] == ["a", "b", "c", "d"]
    then = client.get("/tables/t/records", params={"min": "null", "as_of": str(ingested)})
    assert then.status_code == 200, then.text
    assert [r["key"] for r in then.json()["records"]] == ["a", "b"]
    future = client.get("/tables/t/records", params={"min": "null", "as_of": "2999-01-01T00:00:00Z"})
    assert future.status_code == 400 and "in the future" in future.json()["detail"], future.text
    for bad in ("yesterday", str(2**64)):
        got = client.get("/tables/t/records", params={"min": "null", "as_of": bad})
        assert got.status_code == 400 and bad in got.json()["detail"], got.text
    got = client.get("/tables/t/records", params={"min": "null", "as_of": str(ingested), "buffer": "true"})
    assert got.status_code == 400 and "buffer" in got.json()["detail"], got.text


def test_finding_6_rest_refuses_unknown_query_parameters(rest: tuple[Any, Any]) -> None:
    client, _ = rest
    got = client.get("/tables/t/records", params={"key": '"a"', "asof": "1", "limt": "5"})
    assert got.status_code == 422, got.text
    assert "asof" in got.json()["detail"] and "limt" in got.json()["detail"]
    got = client.get("/tables/t/jobs", params={"kinds": "compaction"})
    assert got.status_code == 422 and "kinds" in got.json()["detail"], got.text
    assert client.get("/tables/t/records", params={"key": '"a"', "limit": "5"}).status_code == 200


@pytest.mark.parametrize("prop,value,jinja_says", [
    ("sleeper.table.bulk.import.source", "s3://raw/{{ data_interval_start | dss }}/", "No filter named 'dss'"),
    ("sleeper.table.bulk.import.source", "s3://raw/{{ ds /", "unexpected 'end of template'"),
    ("sleeper.table.export.destination", "s3://out/{{ data_interval_begin | ds }}/",
     "'data_interval_begin' is undefined"),
    ("sleeper.table.export.destination", "s3://out/{{ params.day }}/", "has no attribute 'day'"),
])
def test_finding_5_a_bad_template_is_refused_when_set(run: Run, tmp_path: Path, prop: str, value: str,
                                                      jinja_says: str) -> None:
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    code, _, err = run("table", "set", "t", f"{prop}={value}")
    line = one_line(err)
    assert code == 1 and "'t'" in line and prop in line and jinja_says in line, err
    code, out, _ = run("table", "describe", "t")
    assert f"{prop} = \n" in out, "nothing was set"


def test_finding_5_good_templates_are_accepted_when_set(run: Run, tmp_path: Path) -> None:
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    for prop, value in (("sleeper.table.bulk.import.source",
                         "s3://raw/{{ data_interval_start | ds }}/,s3://raw/{{ ds_nodash }}/{{ ts_nodash }}/"),
                        ("sleeper.table.export.destination",
                         "s3://out/{{ data_interval_end.strftime('%Y/%m/%d') }}/{{ var.value.bucket }}/"
                         "{{ data_interval_start.add(days=1) | ds }}")):
        code, _, err = run("table", "set", "t", f"{prop}={value}")
        assert code == 0, err


PYTHON = "sleeper.table.iterator.python"
SAMPLES = "tests.unit.sleeper_ops.iterator_samples"


@pytest.fixture
def allowing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
             ) -> Iterator[Callable[..., tuple[Run, Any]]]:
    """``allowing(*modules)``: the ``run`` of a home whose sleeper.toml allows Python
    iterators from ``modules`` only (none: the setting left out), and its Sleeper."""
    opened: list[Any] = []

    def make(*modules: str) -> tuple[Run, Any]:
        h = tmp_path / "home"
        h.mkdir()
        allowed = f"[iterators]\npython_modules = {json.dumps(list(modules))}\n" if modules else ""
        (h / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n' + allowed)
        monkeypatch.setenv("SLEEPER_HOME", str(h))
        shared = sleeper_ops.api.Sleeper(h)
        opened.append(shared)
        monkeypatch.setattr(sleeper_ops.api, "Sleeper", lambda given: contextlib.nullcontext(shared))
        return (lambda *args: invoke_cli(capsys, *args)), shared
    yield make
    for s in opened:
        s.close()


def test_finding_5_python_iterators_come_only_from_allowed_modules(allowing: Callable[..., tuple[Run, Any]],
                                                                   tmp_path: Path) -> None:
    run, _ = allowing()  # the default: no module allowed
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    for value in ("builtins:print", "os:system", f"{SAMPLES}:times_ten"):
        code, _, err = run("table", "set", "t", f"{PYTHON}={value}")
        line = one_line(err)
        assert code == 1 and "'t'" in line and PYTHON in line and "iterators.python_modules" in line, err


def test_finding_5_an_allowed_module_gives_iterators_and_others_are_refused(
        allowing: Callable[..., tuple[Run, Any]], tmp_path: Path) -> None:
    run, _ = allowing(SAMPLES)
    assert run("table", "create", "t", "--schema", schema_file(tmp_path))[0] == 0
    assert run("ingest", "t", records(tmp_path, {"key": "a", "count": 1}))[0] == 0
    code, _, err = run("table", "set", "t", f"{PYTHON}={SAMPLES}:times_ten")
    assert code == 0, err
    code, out, _ = run("query", "t", "--key", '"a"')
    assert (code, json.loads(out)) == (0, {"key": "a", "count": 10})
    code, _, err = run("table", "set", "t", f"{PYTHON}=builtins:print")
    assert code == 1 and "iterators.python_modules" in one_line(err), err


def test_finding_5_a_stored_iterator_outside_the_list_fails_its_own_table_only_and_is_never_imported(
        allowing: Callable[..., tuple[Run, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "walk_probe_iterator.py").write_text("raise RuntimeError('imported')\n\ndef fn(b):\n    return b\n")
    monkeypatch.syspath_prepend(str(probe))
    run, sleeper = allowing(SAMPLES)
    for name in ("t", "other"):
        assert run("table", "create", name, "--schema", schema_file(tmp_path))[0] == 0
        assert run("ingest", name, records(tmp_path, {"key": "a", "count": 1}))[0] == 0
    sleeper.state_store.update_properties("t", {PYTHON: "walk_probe_iterator:fn"})  # set before the allow-list
    for args in (("query", "t", "--key", '"a"'), ("sql", "SELECT * FROM t"), ("compact", "t")):
        code, _, err = run(*args)
        line = one_line(err)
        assert code == 1 and "'t'" in line and "walk_probe_iterator" in line, err
        assert "iterators.python_modules" in line and "imported" not in line, err
    code, out, _ = run("query", "other", "--key", '"a"')
    assert (code, json.loads(out)) == (0, {"key": "a", "count": 1})
    assert run("compact", "other")[0] == 0
