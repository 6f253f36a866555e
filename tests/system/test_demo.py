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
def test_demo_ingests_queries_and_reports_on_the_embedded_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = _run(home, "demo", "--rows", "300000", "--batches", "3")
    assert r.returncode == 0, r.stderr
    assert "ingested 300,000 records" in r.stdout
    assert "15 partitions (8 leaves), 24 file references, 300,000 records" in r.stdout
    assert (home / "sleeper.toml").exists()

    # The table it left behind is a real one: later commands see it in PostgreSQL.
    r = _run(home, "report", "partitions", "demo", "--json")
    assert r.returncode == 0, r.stderr
    parts = json.loads(r.stdout)
    assert sum(p["records"] for p in parts) == 300_000
    assert sum(1 for p in parts if p["leaf"]) == 8
