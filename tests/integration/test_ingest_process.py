"""A new process's ingest, write and flush never import pandas, which would cost each
``sleeper ingest`` and ``sleeper flush`` about half a second (pyarrow imports it when it
converts arrays to or from numpy: see :mod:`sleeper_ops.io.arrow_numpy`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sleeper_ops.api import Sleeper
from statestore.schema import Schema

pytestmark = pytest.mark.integration

SCHEMA = Schema.from_dict({"rowKeyFields": [{"name": "key", "type": "StringType"}],
                           "sortKeyFields": [{"name": "ts", "type": "LongType"}],
                           "valueFields": [{"name": "n", "type": "IntType"}]})
LONGS = Schema.from_dict({"rowKeyFields": [{"name": "id", "type": "LongType"}],
                          "valueFields": [{"name": "s", "type": "StringType"}]})


def test_ingest_write_and_flush_in_a_new_process_do_not_import_pandas(tmp_path: Path, pg_dsn: str) -> None:
    (tmp_path / "sleeper.toml").write_text(f'[state_store]\ndsn = "{pg_dsn}"\n')
    keys = [f"k{(i * 7919) % 5000:05d}" for i in range(5000)]  # unsorted, across every leaf
    pq.write_table(pa.table({"key": keys, "ts": pa.array(range(5000), pa.int64()),
                             "n": pa.array([i % 100 for i in range(5000)], pa.int32())}), tmp_path / "in.parquet")
    (tmp_path / "rows.jsonl").write_text('{"key": "k00001", "ts": 9999, "n": 1}\n{"key": "zz", "ts": 1, "n": 2}\n')
    (tmp_path / "ids.jsonl").write_text("".join(f'{{"id": {i * 37 % 300}, "s": "v{i}"}}\n' for i in range(300)))
    with Sleeper(tmp_path) as s:
        s.create_table("t", SCHEMA, split_points=["k01000", "k02500", "k04000"])
        s.create_table("ids", LONGS, split_points=[100, 200])
    code = textwrap.dedent("""
        import sys
        from sleeper_ops.cli import main
        home = sys.argv[1]
        for args in (["ingest", "t", home + "/in.parquet"], ["write", "t", home + "/rows.jsonl"],
                     ["flush", "t"], ["ingest", "ids", home + "/ids.jsonl"]):
            try:
                main(["--home", home, *args])
            except SystemExit as e:
                assert not e.code, (args, e.code)
        print("pandas" in sys.modules)
    """)
    env = {k: v for k, v in os.environ.items() if k != "SLEEPER_STATE_STORE_DSN"}
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=180,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "False", "an ingest, a write or a flush imported pandas"
    with Sleeper(tmp_path) as s:
        t = s.table("t")
        rows = t.query(ranges=[("", None)], buffer=False)  # files only: the flush moved the writes there
        assert rows.num_rows == 5002
        got = list(zip(rows.column("key").to_pylist(), rows.column("ts").to_pylist()))
        assert got == sorted([(k, i) for i, k in enumerate(keys)] + [("k00001", 9999), ("zz", 1)])
        state = t.state()
        leaves = {p.id for p in state.partitions.values() if p.is_leaf}
        assert {r.partition_id for r in state.references.values()} == leaves  # every leaf got its rows
        ids = s.table("ids").query(ranges=[(-1, None)]).column("id").to_pylist()
        assert ids == sorted(i * 37 % 300 for i in range(300))
