"""The fault matrix's SIGKILL row: every writer, as users run it (one ``sleeper`` process),
killed mid-run, then run again as a user or Airflow's retry would, on PostgreSQL and on
DynamoDB + S3.

Writers: ``write``, ``ingest`` and ``delete`` (run again with the same ``--request-id``), ``flush``,
``compact`` and ``split`` (run again as they are). Each cell first times the command on
a twin table (its baseline), then, for each seed, sets the table up afresh, starts the command and kills it with
SIGKILL at a seeded fraction (30-95 %) of the baseline; a run the kill missed (it had
already exited) tries again at a smaller fraction, and the cell asserts the kill landed
(exit -9). Each run ends with exact counts through a fresh process: every acknowledged
record exactly once, a deleted one never, the table's files all there; the seed and
the fraction are printed in every failure.

The commands timed, killed and run again, and the final count, are ``sleeper``
processes; a table's set-up (``table create``, the ``ingest`` or ``write`` of its
first records) runs the same CLI commands in this process (``main(argv)``), and the
baseline's model check reads the table here: about half of a cell's processes were
set-up, each a second of start-up on a loaded machine, none of it under test.

Seeds: ``SLEEPER_KILL_SEEDS`` (e.g. ``1,2,3`` for a session's measurement); by default
one a run, drawn from the run's seed (``SLEEPER_HYPOTHESIS_SEED``, printed in the
header), so successive CI runs cover other kill points while a run stays within the
suite's time; a failing seed replays with ``SLEEPER_KILL_SEEDS=<seed>``. The test
modules ``test_fault_matrix_kills_postgres.py`` and ``..._dynamodb.py`` run this per
backend (so a parallel run spreads them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq

from tests.integration.statestore.conftest import moto_with_bucket as _moto_with_bucket
from tests.integration.test_dynamodb_cli import sleeper_toml

SLEEPER = str(Path(sys.executable).with_name("sleeper"))
SEEDS = [int(x) for x in os.environ.get(
    "SLEEPER_KILL_SEEDS", str(int(os.environ.get("SLEEPER_HYPOTHESIS_SEED", "1")) % 1000)).split(",") if x.strip()]
SCHEMA = '{"rowKeyFields": [{"name": "key", "type": "StringType"}], "valueFields": [{"name": "v", "type": "LongType"}]}'
BUCKET = "sleeper-kill-matrix"
ROWS = 150_000
WRITERS = ["write", "ingest", "delete", "flush", "compact", "split"]
#: the properties of every table: compaction merges any two files; split at a low threshold
PROPERTIES = ["sleeper.table.compaction.strategy=basic", "sleeper.table.compaction.files.batch.size=2",
              "sleeper.table.partition.splitting.threshold=1000"]


def moto_address() -> Iterator[str]:
    """A moto server with the data bucket; yields host:port."""
    with _moto_with_bucket(BUCKET) as url:
        yield url[len("http://"):]


def postgres_home(tmp_path: Path, dsn: str) -> Path:
    """A SLEEPER_HOME on PostgreSQL (a database of the test's own), data on local disk."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "sleeper.toml").write_text(f'[state_store]\ndsn = "{dsn}"\n')
    return home


def dynamodb_home(tmp_path: Path, moto: str) -> Path:
    """A SLEEPER_HOME on DynamoDB + S3 (moto at ``moto``, host:port)."""
    home = tmp_path / "home"
    home.mkdir()
    prefix = f"k{uuid.uuid4().hex[:8]}"
    (home / "sleeper.toml").write_text(sleeper_toml(moto, prefix, f"{prefix}-", BUCKET))
    return home


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "SLEEPER_HOME": str(home), "AWS_EC2_METADATA_DISABLED": "true"}


def _cli(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run([SLEEPER, *args], env=_env(home), capture_output=True, text=True, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"sleeper {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r


def _cli_here(home: Path, *args: str) -> None:
    """``sleeper --home HOME args`` run in this process: the CLI's own code (its Sleeper
    closed when the command ends), without a new process's start-up. For set-up only."""
    from sleeper_ops.cli.commands import main

    with mock.patch.dict(os.environ, {"AWS_EC2_METADATA_DISABLED": "true"}):
        try:
            main(["--home", str(home), *args])
        except SystemExit as e:  # the CLI's one-line error is on stderr (captured by pytest)
            if e.code:
                raise AssertionError(f"sleeper {' '.join(args)} exited {e.code}") from e


def _file(path: Path, prefix: str, n: int) -> Path:
    pq.write_table(pa.table({"key": [f"{prefix}{i:07d}" for i in range(n)], "v": pa.array(range(n), pa.int64())}),
                   path)
    return path


class Cell:
    """One writer's table: its setup, the command to kill, and what must be there after."""

    def __init__(self, writer: str, home: Path, data: Path, table: str) -> None:
        self.writer, self.home, self.table = writer, home, table
        self.request_id = f"kill-{uuid.uuid4().hex}"
        self.big = _file(data / f"{table}-big.parquet", "a", ROWS)
        self.expected: set[str] = set()

    def setup(self) -> None:
        schema = self.home / "schema.json"
        schema.write_text(SCHEMA)
        props = [a for p in PROPERTIES for a in ("--property", p)]
        _cli_here(self.home, "table", "create", self.table, "--schema", str(schema), *props)
        keys = {f"a{i:07d}" for i in range(ROWS)}
        if self.writer in ("flush",):
            _cli_here(self.home, "write", self.table, str(self.big))
            self.expected = keys
        elif self.writer in ("delete", "split"):
            _cli_here(self.home, "ingest", self.table, str(self.big))
            self.expected = keys
        elif self.writer == "compact":
            half = ROWS // 2
            first = _file(self.big.with_name(f"{self.table}-1.parquet"), "a", half)
            second = _file(self.big.with_name(f"{self.table}-2.parquet"), "b", half)
            _cli_here(self.home, "ingest", self.table, str(first))
            _cli_here(self.home, "ingest", self.table, str(second))
            self.expected = {f"a{i:07d}" for i in range(half)} | {f"b{i:07d}" for i in range(half)}

    def command(self) -> list[str]:
        rid = ["--request-id", self.request_id]
        return {"write": ["write", self.table, str(self.big), *rid],
                "ingest": ["ingest", self.table, str(self.big), *rid],
                "delete": ["delete", self.table, "--range", '"a0050000"', '"a0100000"', *rid],
                "flush": ["flush", self.table], "compact": ["compact", self.table], "split": ["split", self.table],
                }[self.writer]

    def after(self) -> set[str]:
        """The keys the table must hold once the command has run to the end."""
        if self.writer in ("write", "ingest"):
            return {f"a{i:07d}" for i in range(ROWS)}
        if self.writer == "delete":
            return {k for k in self.expected if not "a0050000" <= k < "a0100000"}
        return self.expected


def _keys(home: Path, table: str) -> list[str]:
    out = _cli(home, "sql", f'SELECT key FROM "{table}"').stdout.splitlines()
    return [json.loads(line)["key"] for line in out if line]


def _keys_here(home: Path, table: str) -> list[str]:
    """What :func:`_keys` answers, read in this process (``Sleeper.sql``, as the command does)."""
    from sleeper_ops.api import Sleeper

    with Sleeper(home) as s:
        return s.sql(f'SELECT key FROM "{table}"').column("key").to_pylist()


def _timed(home: Path, args: list[str]) -> float:
    start = time.monotonic()
    _cli(home, *args)
    return time.monotonic() - start


def _kill_at(home: Path, args: list[str], after_s: float) -> int:
    """Start ``sleeper args`` and SIGKILL it ``after_s`` seconds in; its exit code."""
    proc = subprocess.Popen([SLEEPER, *args], env=_env(home), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        proc.wait(timeout=after_s)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    return proc.wait(timeout=60)


def kill_and_run_again(writer: str, backend: str, home: Path, tmp_path: Path) -> Any:
    """The cell ``writer`` x ``backend`` (see the module docstring)."""
    baseline = Cell(writer, home, tmp_path, f"base_{writer}")
    baseline.setup()
    took = _timed(home, baseline.command())
    assert sorted(_keys_here(home, baseline.table)) == sorted(baseline.after()), "the unfaulted run is the model"
    for seed in SEEDS:
        rng = random.Random(f"{writer}-{backend}-{seed}")
        cell = Cell(writer, home, tmp_path, f"t{seed}_{writer}")
        cell.setup()
        fraction = rng.uniform(0.3, 0.95)
        for _ in range(4):
            code = _kill_at(home, cell.command(), took * fraction)
            if code == -signal.SIGKILL:
                break
            assert code == 0, f"{writer} exited {code} before the kill"
            # the kill missed: the run ended first; the table is as after a whole run, start afresh
            cell = Cell(writer, home, tmp_path, f"t{seed}_{writer}_{uuid.uuid4().hex[:4]}")
            cell.setup()
            fraction *= 0.6
        where = f"{writer} on {backend}, seed {seed}, killed at {fraction:.0%} of {took:.2f} s"
        assert code == -signal.SIGKILL, f"the kill never landed: {where}"
        _cli(home, *cell.command())  # run again: a user, or Airflow's retry
        got = _keys(home, cell.table)
        assert len(got) == len(set(got)), f"records doubled: {where}"
        assert set(got) == cell.after(), f"{len(cell.after() - set(got))} lost, " \
                                         f"{len(set(got) - cell.after())} that should not be there: {where}"
