"""Issue 34, findings 5 and 6 walked as a user meets them: what used to be accepted when set
and fail later, or chosen silently, is now refused in one line when set, or does what the
docs say. Each case is named after its finding; all run in process on the in-memory state
store (a ``sleeper.toml`` naming it), through the ``sleeper`` command as a user types it."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Callable, Iterator

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
