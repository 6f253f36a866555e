"""``make test-profile``'s per-program view (tests/process_profile.py): the names it
gives command lines, and a sampler that finds a marked child process and its CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster_helpers import poll
from tests.process_profile import MARK, ProcessSampler, program, summary


@pytest.mark.parametrize("cmdline, name", [
    ("/x/.venv/bin/python /x/.venv/bin/sleeper --home /h ingest t f.parquet", "sleeper ingest"),
    ("/x/.venv/bin/python /x/.venv/bin/airflow scheduler", "airflow scheduler"),
    ("/x/.venv/bin/python -m sleeper_ops.cluster.moto_server --port 5", "sleeper_ops.cluster.moto_server"),
    ("/x/.venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "python -c (pytest worker)"),
    ("/x/.venv/bin/python /x/tests/integration/dag_runner.py serve /x/dags", "dag_runner.py"),
    ("/usr/lib/jvm/bin/java -cp a:b -Xmx1g org.apache.spark.deploy.SparkSubmit --master local[2] app.py",
     "java SparkSubmit"),
    ("/pg/bin/postgres -D /tmp/pg -k /tmp/pg", "postgres"),
    ("postgres: checkpointer", "postgres"),
    ("redis-server 127.0.0.1:6379", "redis-server"),
])
def test_a_command_line_is_named_by_its_program(cmdline: str, name: str) -> None:
    assert program(cmdline) == name


def test_the_sampler_finds_a_marked_child_and_its_cpu_and_skips_the_rest(tmp_path: Path) -> None:
    burn = ("import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
            "open(sys.argv[1], 'w').close()\ntime.sleep(60)")
    marked, other = (subprocess.Popen([sys.executable, "-c", burn, str(tmp_path / f"burnt-{run}")],
                                      env={**os.environ, MARK: f"run-{run}"}) for run in (1, 2))
    sampler = ProcessSampler(tmp_path / "p.jsonl", "run-1")
    try:
        poll(lambda: (tmp_path / "burnt-1").exists() and (tmp_path / "burnt-2").exists(),
             "both children to have burnt their CPU", 60)
        sampler.sample()
    finally:
        marked.kill()
        other.kill()
        sampler.stop()
    rows = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text().splitlines()]
    assert [r["pid"] for r in rows] == [marked.pid]
    assert rows[0]["cpu"] >= 0.5
    assert "python -c" in summary(tmp_path / "p.jsonl")
