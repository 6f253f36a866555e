"""The demo runs end to end through the installed ``sleeper`` command on the embedded default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SLEEPER = str(Path(sys.executable).parent / "sleeper")


def _run(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLEEPER_HOME": str(home)}
    env.pop("SLEEPER_STATE_STORE_DSN", None)
    return subprocess.run([SLEEPER, *args], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_demo_ingests_splits_compacts_and_collects_on_the_embedded_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = _run(home, "demo", "--rows", "300000", "--batches", "5")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "ingested 300,000 records" in out
    assert "15 partitions (8 leaves), 40 file references, 300,000 records" in out
    assert "demo: split 8 partitions" in out
    assert "16 compaction jobs (16 new, 0 retried) on runner local: 16 committed, 0 refused, 0 failed" in out
    assert "deleted 5 unreferenced files" in out  # each batch one file, shared by the 8 leaves
    assert "31 partitions (16 leaves), 16 file references, 300,000 records" in out
    assert out.index("split 8") < out.index("compaction jobs") < out.index("unreferenced files")
    assert (home / "sleeper.toml").exists()
    lines = out.splitlines()
    assert len(lines) <= 60, f"the demo printed {len(lines)} lines"
    tail = "\n".join(lines[-4:])
    for step in ("sleeper report partitions demo", "sleeper sql ", "make airflow",
                 "http://127.0.0.1:8080/sleeper/ui/"):
        assert step in tail, f"{step!r} is not among the demo's last lines:\n{tail}"

    # The table it left behind is a real one: later commands see it in PostgreSQL.
    r = _run(home, "report", "partitions", "demo", "--json")
    assert r.returncode == 0, r.stderr
    parts = json.loads(r.stdout)
    assert sum(p["records"] for p in parts) == 300_000
    assert sum(1 for p in parts if p["leaf"]) == 16
    assert all(p["files"] == (1 if p["leaf"] else 0) for p in parts), "one file per leaf after compaction"

    r = _run(home, "report", "jobs", "demo", "--json")
    assert r.returncode == 0, r.stderr
    jobs = json.loads(r.stdout)
    assert sorted({(j["kind"], j["status"]) for j in jobs}) == [("compaction", "committed"), ("ingest", "committed"),
                                                            ("split", "committed")]
    assert sum(j["rows_written"] for j in jobs if j["kind"] == "compaction") == 300_000

    # A table the demo did not create is never touched, whatever its name.
    (tmp_path / "schema.json").write_text(json.dumps({"rowKeyFields": [{"name": "key", "type": "StringType"}]}))
    assert _run(home, "table", "create", "mine", "--schema", str(tmp_path / "schema.json")).returncode == 0
    (tmp_path / "rows.jsonl").write_text('{"key": "a"}\n')
    assert _run(home, "ingest", "mine", str(tmp_path / "rows.jsonl")).returncode == 0
    r = _run(home, "demo", "--rows", "1000", "--table", "mine")
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "error: table 'mine' exists and was not created by the demo, so the demo leaves it alone; run it on "
        "another table: sleeper demo --table demo2"]
    r = _run(home, "query", "mine", "--key", '"a"')
    assert r.returncode == 0 and json.loads(r.stdout) == {"key": "a"}
