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
                      rf"sleeper compact \(CLI\)\s+{NUM}\s+{NUM}", rf"shared by 2 leaves\s+{NUM}\s+{NUM}",
                      rf"compaction DAG\s+{NUM}\s+{NUM}", rf"\(its run_local task\)\s+{NUM}\s+{NUM}",
                      rf"sleeper compact \(CLI\)\s.*\s{NUM} \({NUM}-{NUM}\)$",  # vs the plain copy, per repeat
                      r"goals: local runner"],
    "ingest.py": [rf"baseline: pyarrow read \+ write zstd\s+{SPREAD} rows/s",
                  rf"ingest, 4 M-row chunks\s+{SPREAD} rows/s .*peak RSS {SPREAD} MB",
                  rf"ingest, 4 spilled chunks \+ merge\s+{SPREAD} rows/s .*peak RSS {SPREAD} MB"],
    "lookups_under_maintenance.py": [rf"^quiet\s+{SPREAD}\s+{SPREAD}\s+{SPREAD}$",
                                     rf"^nice 0\s+{SPREAD}\s+{SPREAD}\s+{SPREAD}$",
                                     rf"^nice 10\s+{SPREAD}\s+{SPREAD}\s+{SPREAD}$",
                                     rf"ratio nice 10 / nice 0 \(each run\): p50 {SPREAD}  p99 {SPREAD}  "
                                     rf"maintenance rows/s (?:{SPREAD}|nan \(nan–nan\))$"],
    "peers.py": [rf"\| a \| ours \| query runner \| native \| \d+ \| [\d,]+ \|( {SPREAD} \|){{6}}$",
                 rf"\| b \| ours \| Sleeper.sql \| SQL \| \d+ \| [\d,]+ \|( {SPREAD} \|){{6}}$",
                 r"Sleeper.sql DataFusion target_partitions = \d+", r"peers skipped \(--smoke\)"],
    "sql_lookups.py": [rf"exact key\s+p50 skip {SPREAD}  filter {SPREAD}  ratio skip / filter {SPREAD}$",
                       rf"range ~1,000 rows\s+p50 skip {SPREAD}  filter {SPREAD}  ratio skip / filter {SPREAD}$"],
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
    "scale.py": [rf"\| 300,000 \| {NUM} \| \d+% \| \d+ \| {NUM} \(\d+\) \| \d+ \|",
                 rf"ingest rate ratio 300,000 / 100,000 rows: {NUM}",
                 rf"exact-key p50 warm ratio 300,000 / 100,000 rows: {NUM}",
                 r"rows counted by a full-range query: 300,000"],
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
#: scripts whose smoke run is a test of its own (which checks the same patterns and more)
OWN_TEST = {"scale.py"}


def test_every_bench_script_has_a_smoke_check() -> None:
    scripts = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))
    assert scripts == sorted(EXPECTED)


def run_smoke(script: str, tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``bench/<script> --smoke *args`` in ``tmp_path``; its output, once it exited 0 and
    shows every pattern of EXPECTED."""
    env = env or {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
    # the timeout guards against a hang: compaction.py's smoke takes 43 s alone, and went past
    # 180 s under the whole suite's load on a slow day
    r = subprocess.run([sys.executable, str(BENCH / script), "--smoke", *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=360)
    assert r.returncode == 0, f"{script} --smoke exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    for pattern in EXPECTED[script]:
        assert re.search(pattern, r.stdout, re.MULTILINE), \
            f"{script}: no line matches {pattern!r} in:\n{r.stdout[-3000:]}"
    return r.stdout


@pytest.mark.parametrize("script", sorted(set(EXPECTED) - OWN_TEST))
def test_bench_script_runs_in_smoke_mode_and_prints_its_figures(script: str, tmp_path: Path,
                                                               tmp_path_factory: pytest.TempPathFactory) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLEEPER_", "AIRFLOW"))}
    if script in ("compaction.py", "rest_query.py"):  # their Airflow copies the run's migrated database
        env["SLEEPER_BENCH_AIRFLOW_DB"] = str(migrated_db(tmp_path_factory))
    r_stdout = run_smoke(script, tmp_path, env=env)
    if script == "rest_read_rss.py":
        figures = json.loads(r_stdout.strip().splitlines()[-1])
        assert figures["rows_read"] == 20_000 and figures["peak_rss_mib"] >= figures["idle_rss_mib"] > 0


def test_scale_smoke_builds_300k_rows_with_splits_and_checks_every_checkpoint(tmp_path: Path) -> None:
    """bench/scale.py --smoke: 300,000 rows ingested while maintenance splits and compacts,
    a checkpoint every 100,000 whose lookups all found their records (the bench exits 1
    otherwise), with figures that make sense, and a plot drawn."""
    run_smoke("scale.py", tmp_path, "--json", "scale.json", "--plot", "scale.png")
    result = json.loads((tmp_path / "scale.json").read_text())
    assert (result["rows"], result["counted"], result["stopped"]) == (300_000, 300_000, None)
    cps = result["checkpoints"]
    assert [cp["rows"] for cp in cps] == [100_000, 200_000, 300_000]
    for cp in cps:
        assert cp["lookups_checked"] == 2 * 2 + 2 * 20  # 2 cold and 20 warm, exact and range
        if not cp["records_approximate"]:
            assert cp["records_in_state"] == cp["rows"]
        assert cp["bytes_per_row"] > 0 and cp["statestore_bytes"] > 0 and cp["ingest_rows_per_s"] > 0
        assert 0 <= cp["stalled_share"] < 1  # ingest waits for compaction (at most 8 files a leaf), never all along
        # a leaf just split holds no reference until its parent's are split down to it
        # (SplitFileReferences): until then its records are in the files referenced above it
        on_leaves = round(cp["files_per_leaf"] * cp["leaves"])
        assert cp["files"] >= 1 and cp["leaves"] >= 1 and cp["files"] >= on_leaves
        assert cp["files_per_leaf_max"] >= cp["files_per_leaf"] >= 0
        assert cp["backlog"] >= cp["files"] - on_leaves  # references above the leaves are backlog
        for kind in ("exact_warm", "exact_cold", "range_warm", "range_cold", "commit_ms"):
            assert 0 < cp[kind]["p50"] <= cp[kind]["p99"]
        assert cp["rss_ingest_mb"] > 0 and cp["rss_maintenance_mb"] > 0 and cp["load_s"] > 0
    assert cps[-1]["leaves"] > 1 and sum(cp["maintenance_passes"] for cp in cps) > 0
    assert (result["maintenance_nice"], result["maintenance_nice_seen"]) == (1, [1])  # every pass ran lowered
    assert (tmp_path / "scale.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
