"""The README's five-minute tour runs as written: every line of its shell block, then
its Python snippet, through the installed ``sleeper`` command on the embedded default,
in a fresh directory and ``SLEEPER_HOME``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def tour_lines() -> list[str]:
    text = (REPO / "README.md").read_text()
    m = re.search(r"<!-- tour:[^>]*-->\s*```bash\n(.*?)```", text, re.S)
    assert m, "the README lost its tour"
    return [line for line in m.group(1).splitlines() if line.strip()]


def readme_python() -> str:
    text = (REPO / "README.md").read_text()
    m = re.search(r"From Python:\s*```python\n(.*?)```", text, re.S)
    assert m, "the README lost its Python snippet"
    return m.group(1)


@pytest.fixture
def tour_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A user's environment: the venv on PATH, a fresh SLEEPER_HOME, no other SLEEPER_
    setting (so the embedded server outlives each command, as it does for users); the
    server is stopped afterwards, so the test leaves none behind."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLEEPER_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["SLEEPER_HOME"] = str(tmp_path / ".sleeper")
    yield env
    subprocess.run([str(BIN / "sleeper"), "server", "stop"], cwd=tmp_path, env=env, capture_output=True, timeout=120)


@pytest.mark.integration
def test_the_readme_tour_runs_line_by_line(tmp_path: Path, tour_env: dict[str, str]) -> None:
    env = tour_env
    lines = tour_lines()
    assert lines[0] == ". .venv/bin/activate", "the tour starts by activating the venv (the test puts it on PATH)"
    outputs = []
    for line in lines[1:]:
        p = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, f"{line}\nexit {p.returncode}: {p.stderr}"
        outputs.append((line, p.stdout))
    by_line = dict(outputs)
    queries = [out for line, out in outputs if line.startswith("sleeper query events --key")]
    assert [json.loads(r) for r in queries[0].splitlines()] == [{"key": "kiwi", "count": 2}] * 2
    assert [json.loads(r) for r in queries[1].splitlines()] == [{"key": "kiwi", "count": 4}]
    sql = next(out for line, out in outputs if line.startswith("sleeper sql"))
    assert [json.loads(r) for r in sql.splitlines()] == [{"key": "apple", "n": 2}, {"key": "kiwi", "n": 4},
                                                         {"key": "plum", "n": 6}]
    assert "0 compaction jobs" in by_line["sleeper compact events                          # merges each leaf's "
                                          "files (or says why not)"]
    assert by_line["sleeper report partitions events"].startswith("5 partitions (3 leaves), 6 file references, "
                                                                  "6 records")

    p = subprocess.run([sys.executable, "-c", readme_python()], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


#: The task pages whose marked blocks run, in this order, in one home: the tables page
#: first (it creates and deletes its own ``events``), then ``events`` is created as the
#: tour creates it, for the others.
TASK_PAGES = ["tables-and-properties.md", "writes.md", "queries-and-sql.md", "maintenance.md"]
RUN_MARK = re.compile(r"<!-- run: [^>]*-->\s*```[a-z]*\n(.*?)```", re.S)


@pytest.mark.integration
def test_the_marked_commands_of_the_task_pages_run(tmp_path: Path, tour_env: dict[str, str]) -> None:
    env = tour_env
    tour = tour_lines()
    setup = tour[1:4]  # the tour's schema.json, splits.txt and rows.jsonl
    create = [line for line in tour if line.startswith(("sleeper table create", "sleeper ingest"))]
    ran = 0
    for name in TASK_PAGES:
        blocks = RUN_MARK.findall((REPO / "docs" / "usage" / name).read_text())
        assert blocks, f"docs/usage/{name} has no block marked to run"
        lines = [line for b in blocks for line in b.splitlines() if line.strip()]
        if name == TASK_PAGES[0]:
            lines = setup + lines
        elif name == TASK_PAGES[1]:
            lines = create + lines
        for line in lines:
            p = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=120)
            assert p.returncode == 0, f"docs/usage/{name}: {line}\nexit {p.returncode}: {p.stderr}"
            ran += 1
    assert ran >= 20
