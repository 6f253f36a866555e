"""Issue 34, Deliver item 1 (isolation), walked as a user meets it: each case failed
before the fix and passes now.

Finding 1, "one legal table name removes every table's DAGs": a 95-200 character name
was accepted, and its DAG tag ``table:<name>`` (over Airflow's 100 characters) made every
DAG file fail to import. Now such a name is refused in one line giving the rule (here),
and a table that cannot be built, whatever the reason, is the import error of its DAG
files while every other table's DAGs load (on a real parse:
``tests/integration/test_dags.py::test_walk_finding_1_...``; in a DagBag:
``tests/unit/sleeper_ops/test_dag_isolation.py``), and is marked red on the status page
(``tests/unit/sleeper_ops/test_status_page.py::test_walk_finding_1_...``, and in Chromium
``tests/integration/test_airflow_live.py::test_walk_findings_1_and_8_...``).

Finding 8, "a long table name pushes the status page's columns off screen": see
``tests/unit/sleeper_ops/test_status_page.py::test_walk_finding_8_...`` and the Chromium case.

The CLI runs in this process on an in-memory state store (the rule is checked before the
store is asked)."""

from __future__ import annotations

import json
from pathlib import Path

from sleeper_ops import Sleeper
from sleeper_ops.io.storage import ObjectStore
from statestore.memory import InMemoryStateStore
from tests.unit.sleeper_ops.cli_runner import run_cli

SCHEMA = {"rowKeyFields": [{"name": "key", "type": "StringType"}],
          "valueFields": [{"name": "value", "type": "StringType"}]}


def test_finding_1_a_name_too_long_for_the_dag_tag_is_refused_in_one_line_and_one_that_fits_gets_every_dag(
        tmp_path: Path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    from sleeper_ops.orchestration.dag_factory import table_dags_problem

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    with Sleeper(state_store=InMemoryStateStore(), objects=ObjectStore(str(tmp_path / "data"))) as sleeper:
        def cli(*args: str) -> tuple[int, str, str]:
            return run_cli(sleeper, monkeypatch, capsys, *args)

        long, fits = "clickstream_" + "x" * 83, "clickstream_" + "x" * 82  # 95 and 94 characters
        code, _, err = cli("table", "create", long, "--schema", str(schema))
        assert code == 1 and len(err.strip().splitlines()) == 1, err
        assert f"'{long}' cannot be a table name: a table name is 1 to 94 ASCII letters" in err
        assert sleeper.tables() == []  # nothing half-created
        assert cli("table", "create", fits, "--schema", str(schema))[0] == 0
        code, _, err = cli("table", "rename", fits, long)
        assert code == 1 and "cannot be a table name: a table name is 1 to 94" in err
        assert [t.name for t in sleeper.tables()] == [fits]
        assert table_dags_problem(sleeper.table(fits).info) is None  # its DAG ids and tag fit Airflow's limits
