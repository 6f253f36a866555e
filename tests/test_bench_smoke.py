"""Every benchmark script still runs: ``bench/<name>.py --smoke`` (tiny sizes, a few
seconds, figures that mean nothing) exits 0 and prints its figures in their usual shape.

A new script in ``bench/`` must be listed in EXPECTED (the test of the list fails
otherwise), with a pattern for each figure its output must show.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.airflow_db import migrated_db

BENCH = Path(__file__).resolve().parents[1] / "bench"
NUM = r"[\d,]+(?:\.\d+)?"
#: a median and its spread over runs: "1.23 (1.01–1.50)"
SPREAD = rf"{NUM} \({NUM}–{NUM}\)"

#: per script, the figures its output must show (regular expressions, each must match a line)
EXPECTED: dict[str, list[str]] = {
    "as_of.py": [rf"\(a\) current read, query path .*: {NUM} ms", rf"\(c\) as of before all .*: {NUM} ms",
                 rf"\(e\) AddFiles of 2,000 files: .*ratio {NUM}",
                 rf"\(f\) exact-key query, 20,000 rows .*ratio {NUM}"],
    "bulk_import.py": [rf"baseline: standard ingest\s+{NUM} rows/s", r"bulk import: not run"],
    "compaction.py": [rf"plain copy\s+{NUM}\s+{NUM}", rf"runner local\s+{NUM}\s+{NUM}",
                      rf"sleeper compact \(CLI\)\s+{NUM}\s+{NUM}",
                      rf"compaction DAG\s+{NUM}\s+{NUM}", rf"\(its run_local task\)\s+{NUM}\s+{NUM}",
                      r"goals: local runner"],
    "ingest.py": [rf"baseline: pyarrow read \+ write zstd\s+{SPREAD} rows/s",
                  rf"ingest, 4 M-row chunks\s+{SPREAD} rows/s .*peak RSS {SPREAD} MB",
                  rf"ingest, 4 spilled chunks \+ merge\s+{SPREAD} rows/s .*peak RSS {SPREAD} MB"],
    "peers.py": [rf"\| a \| ours \| query runner \| native \| \d+ \| [\d,]+ \|( {SPREAD} \|){{6}}$",
                 rf"\| b \| ours \| Sleeper.sql \| SQL \| \d+ \| [\d,]+ \|( {SPREAD} \|){{6}}$",
                 r"Sleeper.sql DataFusion target_partitions = \d+", r"peers skipped \(--smoke\)"],
    "query.py": [rf"2,000 rows\s+exact\s+p50\s+{NUM}", rf"4,000 rows\s+range\s+p50\s+{NUM}",
                 rf"exact p50 ratio 4,000 / 2,000 rows: {NUM}",
                 rf"new process, whole wall: sleeper query --key median {NUM} ms .* "
                 rf"sleeper --help {NUM} ms; ratio {NUM}"],
    "query_leaves.py": [rf"16 leaves\s+\S+.*p50\s+{NUM}", rf"p50 ratio 16 / 4 leaves: {NUM}"],
    "rest_query.py": [rf"through Airflow's API server \(Bearer token\)\s+p50 {SPREAD} ms\s+p99 {SPREAD} ms",
                      rf"REST GET /records\?key= \(HTTP, keep-alive\)\s+p50 {SPREAD} ms\s+p99 {SPREAD} ms",
                      rf"in process Table.query\s+p50 {SPREAD} ms\s+p99 {SPREAD} ms",
                      rf"ratio Airflow / in process: p50 {SPREAD}\s+p99 {SPREAD}",
                      rf"ratio Airflow / bare app: p50 {SPREAD}\s+p99 {SPREAD}",
                      rf"ratio REST / in process: p50 {SPREAD}\s+p99 {SPREAD}", rf"load average {NUM} {NUM} {NUM}"],
    "rest_read_rss.py": [rf"read 20,000 rows .* peak/idle = {NUM}"],
    "serialisation.py": [rf"transactions encode \({NUM}\): this {SPREAD} s$",
                         rf"transactions decode \({NUM}\): this {SPREAD} s$",
                         rf"records decode \({NUM}\): this {SPREAD} s$",
                         rf"snapshot load \({NUM} references\): this {SPREAD} s$"],
    "small_ingest.py": [rf"baseline \(pyarrow write \+ one round trip\) p50 {NUM} ms", rf"ingest p50 {NUM} ms"],
    "statestore_commits.py": [rf"\(a\) compaction commits on one table .*: {NUM} commits/s",
                              rf"\(b\) one AddFiles commit of 2,000 files: {NUM} s",
                              rf"\(c\) small commit .*ratio {NUM}"],
    "s3_requests.py": [rf"ingest: 2 ingests writing \d+ files .*: {NUM} requests",
                       rf"compaction: \d+ files into \d+: {NUM} requests",
                       rf"cold exact-key lookup .*: {NUM} requests per lookup",
                       rf"warm exact-key lookup \(20\): {NUM} requests per lookup"],
    "write.py": [rf"\(a\) write of 1000 records \(Arrow\): p50 {NUM} ms", rf"\(b\) 1 writer: {NUM} records/s",
                 rf"\(c\) flush: {NUM} records", rf"\(d\) exact-key query p50: empty buffer {NUM} ms"],
}


def test_every_bench_script_has_a_smoke_check() -> None:
    scripts = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert scripts == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_bench_script_runs_in_smoke_mode_and_prints_its_figures(script: str, tmp_path: Path,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
    if script in ("compaction.py", "rest_query.py"):  # their Airflow copies the run's migrated database
        env["SLEEPER_BENCH_AIRFLOW_DB"] = str(migrated_db(tmp_path_factory))
    r = subprocess.run([sys.executable, str(BENCH / script), "--smoke"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, f"{script} --smoke exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    for pattern in EXPECTED[script]:
        assert re.search(pattern, r.stdout, re.MULTILINE), \
            f"{script}: no line matches {pattern!r} in:\n{r.stdout[-3000:]}"
    if script == "rest_read_rss.py":
        figures = json.loads(r.stdout.strip().splitlines()[-1])
        assert figures["rows_read"] == 20_000 and figures["peak_rss_mib"] >= figures["idle_rss_mib"] > 0
